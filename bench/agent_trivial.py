"""bench/agent_bench.sh's trivial worker: the rendezvous measurement's
payload for launchers that need a Python program (torchrun)."""
