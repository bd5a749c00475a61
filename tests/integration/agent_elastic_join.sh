#!/usr/bin/env bash
# Elastic scale-up: three agents (c10d, --nnodes=2:4) form a group of 3;
# a fourth agent started later is admitted: the group restarts with
# WORLD_SIZE=4 and GROUP_WORLD_SIZE=4, and TORCHELASTIC_RESTART_COUNT stays
# 0 (a membership change does not spend a restart). The workers keep
# running while the group is smaller than 4 and exit 0 once it is 4.
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
port=$(free_port)
agent() { # NAME: one agent of the job
    W_REC=$TMP/rec W_HOLD='[ "$GROUP_WORLD_SIZE" -lt 4 ]' W_HOLD_MAX=40 \
        start_ddprun "$1" --nnodes=2:4 --nproc-per-node=1 --rdzv-backend=c10d \
        --rdzv-endpoint=127.0.0.1:"$port" --rdzv-id=join --rdzv-conf=last_call_timeout=1 \
        --max-restarts=0 --log-dir "$TMP/logs-$1" --no-python "$WORKERS/worker.sh"
}
# The first agent hosts the store; start it first so that killing nothing
# of ours can take the store away from the others.
agent a1
wait_for 10 "a1's store on port $port" store_up "$port"
agent a2
agent a3
# A group of 3 runs (possibly after a round of 2 that admitted a late third).
three() { [ "$(records | grep -c ' GROUP_WORLD_SIZE=3 ')" -ge 3 ]; }
wait_for 20 "a group of 3 nodes to run" three
t0=$(now_ms)
agent a4
for n in a1 a2 a3 a4; do
    pid=PID_$n
    wait_exit 20 "${!pid}"
    assert_rc "$n" 0
done
echo "the 4th agent was admitted and the job finished in $(($(now_ms) - t0)) ms"

records > "$TMP/all"
cat "$TMP/all"
final=$(grep ' GROUP_WORLD_SIZE=4 ' "$TMP/all")
assert_eq "$(wc -l <<< "$final")" 4 "workers in the group of 4"
assert_eq "$(sed -n 's/.* RANK=\([0-9]*\) .*/\1/p' <<< "$final" | sort | tr '\n' ' ')" "0 1 2 3 " \
    "ranks of the group of 4"
assert_eq "$(grep -c ' WORLD_SIZE=4 ' <<< "$final")" 4 "WORLD_SIZE after the restart"
assert_eq "$(grep -vc ' TORCHELASTIC_RESTART_COUNT=0 ' "$TMP/all")" 0 \
    "workers with TORCHELASTIC_RESTART_COUNT other than 0"
assert_grep "$TMP/a4.out" "^worker rank [0-3] of 4 started" "a4's worker"
assert_grep "$TMP/a1.err" "waiting to join|membership changed" "a1's log of the scale-up"
assert_no_leftovers
