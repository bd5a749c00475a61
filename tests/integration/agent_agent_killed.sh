#!/usr/bin/env bash
# kill -9 of one agent of three (c10d, --nnodes=2:3, 2 workers each): its
# workers die with it (PR_SET_PDEATHSIG), the two survivors see the node
# leave, restart the group with WORLD_SIZE 6 -> 4 without spending a
# restart, and exit 0.
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
port=$(free_port)
agent() { # NAME: one agent of the job
    W_REC=$TMP/rec W_HOLD='[ "$GROUP_WORLD_SIZE" -ge 3 ]' W_HOLD_MAX=40 \
        start_ddprun "$1" --nnodes=2:3 --nproc-per-node=2 --rdzv-backend=c10d \
        --rdzv-endpoint=127.0.0.1:"$port" --rdzv-id=shrink --rdzv-conf=last_call_timeout=5 \
        --log-dir "$TMP/logs-$1" --no-python "$WORKERS/worker.sh"
}
# a1 hosts the store; a3, the one killed, must not. (The round closes as
# soon as the third agent joins; the long last call only keeps a slow
# third from missing round 0, whose workers would then finish at once.)
agent a1
wait_for 10 "a1's store on port $port" store_up "$port"
agent a2
agent a3
six() { [ "$(records | grep -c ' WORLD_SIZE=6 ')" -ge 6 ]; }
wait_for 20 "a group of 3 nodes (6 workers) to run" six
# a3's workers are the ones whose parent is a3.
a3_workers=$(for f in "$TMP"/rec/*; do
    p=${f##*/}
    [ "$(awk '{print $4}' "/proc/$p/stat" 2> /dev/null)" = "$PID_a3" ] && echo "$p"
done)
assert_eq "$(wc -w <<< "$a3_workers")" 2 "workers whose parent is a3 (pid $PID_a3)"
t0=$(now_ms)
kill -KILL "$PID_a3"
wait_exit 5 "$PID_a3"
gone() { for p in $a3_workers; do exited "$p" || return 1; done; }
wait_for 3 "a3's workers ($(tr '\n' ' ' <<< "$a3_workers")) to die with it" gone
for n in a1 a2; do
    pid=PID_$n
    wait_exit 20 "${!pid}"
    assert_rc "$n" 0
done
echo "the survivors re-formed the group and finished in $(($(now_ms) - t0)) ms"

records > "$TMP/all"
cat "$TMP/all"
final=$(grep ' GROUP_WORLD_SIZE=2 ' "$TMP/all")
assert_eq "$(wc -l <<< "$final")" 4 "workers in the group of 2 nodes"
assert_eq "$(grep -c ' WORLD_SIZE=4 ' <<< "$final")" 4 "WORLD_SIZE after the shrink"
assert_eq "$(sed -n 's/.* RANK=\([0-9]*\) .*/\1/p' <<< "$final" | sort | tr '\n' ' ')" "0 1 2 3 " \
    "ranks after the shrink"
assert_eq "$(grep -vc ' TORCHELASTIC_RESTART_COUNT=0 ' "$TMP/all")" 0 \
    "workers with TORCHELASTIC_RESTART_COUNT other than 0"
assert_grep "$TMP/a1.err" "node left|membership changed" "a1's log of the shrink"
assert_no_leftovers
