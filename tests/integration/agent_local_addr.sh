#!/usr/bin/env bash
# --local-addr names the node as the others know it: two agents on this
# host, given node-b (started first) and node-a. Hosts take group ranks in
# natural order by that name, so node-a's first worker is global rank 0;
# it fails, and both agents' failure summaries name host node-a.
# timeout: 40
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
port=$(free_port)
agent() { # NAME ADDR
    W_REC=$TMP/rec W_FAIL_RANK=0 W_FAIL_CODE=9 W_HOLD=true W_HOLD_MAX=30 \
        start_ddprun "$1" --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d \
        --rdzv-endpoint=127.0.0.1:"$port" --rdzv-id=addr --max-restarts=0 --local-addr "$2" \
        --log-dir "$TMP/logs-$1" --no-python "$WORKERS/worker.sh"
}
agent first node-b
wait_for 10 "the first agent's store on port $port" store_up "$port"
agent second node-a
for n in first second; do
    pid=PID_$n
    wait_exit 20 "${!pid}"
    assert_rc "$n" 1
done
for n in first second; do
    sed -n '/^Root Cause/,$p' "$TMP/$n.err" > "$TMP/$n.root"
    [ -s "$TMP/$n.root" ] || { cat "$TMP/$n.err"; die "$n printed no 'Root Cause' block"; }
    assert_grep "$TMP/$n.root" "^  rank      : 0 \(local_rank: 0\)$" "$n's root cause rank"
    assert_grep "$TMP/$n.root" "^  host      : node-a$" "$n's root cause host"
done
assert_no_leftovers
echo "--local-addr: node-a holds rank 0 and is named in both summaries"
