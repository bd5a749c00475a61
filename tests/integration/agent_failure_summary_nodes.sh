#!/usr/bin/env bash
# Two agents (c10d, 2 workers each), --max-restarts=0: global rank 2
# (node 1's local rank 0) exits 7 without an error file. Both agents exit
# 1, and both print the failure summary naming rank 2 as the root cause:
# the node where nothing failed learns it from the failures recorded in
# the store.
# timeout: 40
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
port=$(free_port)
agent() { # NAME
    W_REC=$TMP/rec W_FAIL_RANK=2 W_FAIL_CODE=7 W_HOLD=true W_HOLD_MAX=30 \
        start_ddprun "$1" --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d \
        --rdzv-endpoint=127.0.0.1:"$port" --rdzv-id=summary --max-restarts=0 \
        --log-dir "$TMP/logs-$1" --no-python "$WORKERS/worker.sh"
}
agent a1
wait_for 10 "a1's store on port $port" store_up "$port"
agent a2
for n in a1 a2; do
    pid=PID_$n
    wait_exit 20 "${!pid}"
    assert_rc "$n" 1
done
for n in a1 a2; do
    echo "---- $n"
    cat "$TMP/$n.err"
    sed -n '/^Root Cause/,$p' "$TMP/$n.err" > "$TMP/$n.root"
    [ -s "$TMP/$n.root" ] || die "$n printed no 'Root Cause' block"
    assert_grep "$TMP/$n.root" "^  rank      : 2 \(local_rank: 0\)$" "$n's root cause rank"
    assert_grep "$TMP/$n.root" "^  exitcode  : 7 \(pid: [0-9]+\)$" "$n's root cause exit code"
    assert_grep "$TMP/$n.root" "^  host      : $(hostname)$" "$n's root cause host"
    assert_grep "$TMP/$n.root" "exited with code 7" "$n's root cause traceback"
done
assert_no_leftovers
