"""python -m ddprun ARGS...: ddprun ARGS..."""
from ddprun._cli import ddprun

ddprun()
