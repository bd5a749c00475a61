#!/usr/bin/env bash
# A real PyTorch DDP job (gloo) under ddprun: two agents (c10d rendezvous
# on loopback, the same --rdzv-id) with two workers each run
# tests/compat/torch_ddp_agents.py with Debian's torch (or TORCH_PY's, see
# tests/lib/torch.bash); the workers find
# each other through the agent's store (env://, TORCHELASTIC_USE_AGENT_STORE),
# train three DDP steps, and agree on the weights; both agents exit 0.
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

port=$(free_port)
agent() { # NAME
    start_ddprun "$1" --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d ${STORE_PROXY:+--store-proxy "$STORE_PROXY"} \
        --rdzv-endpoint=127.0.0.1:"$port" --rdzv-id=ddp-compat --log-dir "$TMP/logs-$1" \
        "$ROOT/tests/compat/torch_ddp_agents.py"
}
agent a1
wait_for 10 "a1's store on port $port" store_up "$port"
agent a2
for n in a1 a2; do
    pid=PID_$n
    wait_exit 100 "${!pid}"
    assert_rc "$n" 0
done
cat "$TMP"/a1.out "$TMP"/a2.out
# Each node ran two ranks, 0-1 on one and 2-3 on the other (which node
# gets node rank 0 follows the agents' ids: on one host, their pids); every
# rank checked itself.
if grep -q "^rank 0 of 4: ok " "$TMP/a1.out"; then first=a1 second=a2; else first=a2 second=a1; fi
assert_grep "$TMP/$first.out" "^rank 0 of 4: ok " "node rank 0's workers"
assert_grep "$TMP/$first.out" "^rank 1 of 4: ok " "node rank 0's workers"
assert_grep "$TMP/$second.out" "^rank 2 of 4: ok " "node rank 1's workers"
assert_grep "$TMP/$second.out" "^rank 3 of 4: ok " "node rank 1's workers"
assert_grep "$TMP/$first.out" "^final weight sum: -?[0-9]+\.[0-9]+ \(world 4" "rank 0's result"
assert_no_leftovers
