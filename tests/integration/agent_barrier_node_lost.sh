#!/usr/bin/env bash
# A node lost at the exit barrier: node 0's workers have finished and its
# agent waits at the barrier for node 1's; node 1's agent is SIGKILLed
# before its workers say they finished. Node 0 says so and ends 0 at once
# (its workers were done), where it used to wait for the whole join
# timeout (600 s by default) for a node that could never come: a job
# whose work is done does not hang on a node lost at its very end.
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
port=$(free_port)
cat > "$TMP/quick.sh" << 'SH'
#!/bin/sh
[ "$GROUP_RANK" = 0 ] && exit 0
exec sleep 30
SH
chmod +x "$TMP/quick.sh"
start_ddprun n0 --nnodes=2 --node-rank=0 --nproc-per-node=1 --rdzv-backend=c10d \
    --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=barrier --no-python "$TMP/quick.sh"
listening() { (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null; }
wait_for 10 "node 0's store" listening
start_ddprun n1 --nnodes=2 --node-rank=1 --nproc-per-node=1 --rdzv-backend=c10d \
    --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=barrier --no-python "$TMP/quick.sh"
at_barrier() { grep -q "waiting for the other nodes" "$TMP/n0.err"; }
wait_for 20 "node 0 at the exit barrier" at_barrier
kill -KILL "$PID_n1"
wait_exit 10 "$PID_n1"
wait_exit 10 "$PID_n0"
assert_rc n0 0
assert_grep "$TMP/n0.err" "warning: rendezvous 'barrier': node .* was lost at the exit barrier before it said its workers finished" \
    "node 0's word on the lost node"
assert_no_leftovers 5
echo "ok: node 0 ended 0 at once: $(grep -o "node .* was lost at the exit barrier[^;]*" "$TMP/n0.err")"
