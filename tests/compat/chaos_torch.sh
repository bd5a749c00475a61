#!/usr/bin/env bash
# timeout: 180
# The fault campaign (tests/chaos/chaos.py --workload torch) on a PyTorch
# DDP script (examples/snapshot_resume.py: gloo, TORCH_PY's torch, its state
# in DDPRUN_SNAPSHOT_DIR after every step): two nodes, a worker or a node
# SIGKILLed at a random moment; every agent exits 0, the final weights are
# those of a run never interrupted, nothing is left behind. tests/run's
# torch 2.x pass runs it again against today's PyTorch.
# shellcheck source=tests/lib/agent.bash disable=SC2154
source "$(dirname "$0")/../lib/agent.bash"
# shellcheck source=tests/lib/torch.bash
source "$ROOT/tests/lib/torch.bash"
need_torch
echo "torch $TORCH_VERSION ($TORCH_PY)"
# (steps up to 90% of the run: a rank killed in its last moments, after
# the other node's finished and left, fails its node; see chaos.py)
CHAOS_TORCH_LATEST=0.9 GLOO_SOCKET_IFNAME=lo TORCH_PY=$TORCH_PY exec /usr/bin/python3 "$ROOT/tests/chaos/chaos.py" \
    --workload torch --seed 1 --runs "${CHAOS_TORCH_RUNS:-8}" --cover
