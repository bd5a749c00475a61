#!/usr/bin/env bash
# A real PyTorch DDP job (gloo) under one ddprun agent (--standalone, three
# workers): tests/compat/torch_ddp_agents.py with TORCH_PY's torch (see
# tests/lib/torch.bash). The workers rendezvous through the agent's store
# (env://), train three DDP steps, and agree on the weights with each
# other and with one process doing the same steps; ddprun exits 0.
# (torch_ddp_agents.sh runs the same job across two agents.)
# timeout: 120
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
# shellcheck source=tests/lib/torch.bash
source "$ROOT/tests/lib/torch.bash"
need_torch
# ddprun runs PROGRAM as "$PYTHON_EXEC -u PROGRAM"; python3 on PATH may lack torch.
export PYTHON_EXEC=$TORCH_PY
# Gloo picks a network interface for its own connections; stay on loopback.
export GLOO_SOCKET_IFNAME=lo

start_ddprun a --standalone --nproc-per-node=3 --log-dir "$TMP/logs" \
    "$ROOT/tests/compat/torch_ddp_agents.py"
wait_exit 100 "$PID_a"
assert_rc a 0
cat "$TMP/a.out"
for r in 0 1 2; do assert_grep "$TMP/a.out" "^rank $r of 3: ok " "rank $r"; done
assert_grep "$TMP/a.out" "^final weight sum: -?[0-9]+\.[0-9]+ \(world 3" "rank 0's result"
# A script keeps no step record: the goodput line says what is known, no
# made-up restarts (it said "goodput 0.0% of 2.86 s: ... restarts 2.86 s").
assert_grep "$TMP/a.err" "goodput unknown \(the workers keep no step record; ddp-train does\): of [0-9.]+ s, workers ran [0-9.]+ s in 1 attempt \(no restart\)" \
    "the goodput line of a script"
assert_no_leftovers
