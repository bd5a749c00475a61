#!/usr/bin/env bash
# A rank that fails after another node's ranks finished the job and said
# its result is kept (DDPRUN_FINISHED_FILE): a data-parallel job's ranks
# hold one state, so the work is done and nothing is lost. Found by the
# fault campaign: node 1's rank, stopped inside the last collective after
# node 0's had completed it, was killed by the watchdog; node 0 left "anyway"
# with the store and node 1 exited 1 trying to restart a finished job.
#
# Now the round's outcome says it: the first of "finished" (node 0's
# barrier) and "failure" (node 1's) wins. Finished first: node 1's failure
# is counted as after the end, said, and both end 0. Failure first: node 0
# rejoins, its workers resume from what they kept and finish again, and
# both end 0. Each order is driven here: "late", node 1's rank fails well
# after node 0 is at the barrier; "close", just as node 0's rank exits, in
# either order, a few times; "first", node 1's rank fails before node 0's
# finishes (the group restarts, and the restarted ranks finish at once).
# timeout: 120
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
cat > "$TMP/job.sh" << 'SH'
#!/bin/sh
# rank 0 finishes and says so; rank 1 waits for it, then fails ($GAP s after).
# A restarted group has nothing left to do: both finish at once.
if [ "$TORCHELASTIC_RESTART_COUNT" != 0 ]; then
    [ "$RANK" = 0 ] && echo "step 9" > "$DDPRUN_FINISHED_FILE"
    exit 0
fi
if [ "$GAP" = first ]; then # rank 1 fails first; rank 0 then finishes, past the stop
    if [ "$RANK" = 1 ]; then touch "$SYNC/rank1-failed"; exit 3; fi
    trap '' TERM
    while [ ! -e "$SYNC/rank1-failed" ]; do sleep 0.01; done
    sleep 0.3
    echo "step 9" > "$DDPRUN_FINISHED_FILE"
    exit 0
fi
if [ "$RANK" = 0 ]; then
    echo "step 9" > "$DDPRUN_FINISHED_FILE"
    touch "$SYNC/rank0-done"
    exit 0
fi
while [ ! -e "$SYNC/rank0-done" ]; do sleep 0.01; done
sleep "$GAP"
echo "rank 1 fails after the end" >&2
exit 3
SH
chmod +x "$TMP/job.sh"

run_pair() { # NAME GAP
    local port name=$1
    port=$(free_port)
    mkdir -p "$TMP/$name.sync"
    export SYNC="$TMP/$name.sync" GAP=$2
    start_ddprun "${name}_0" --nnodes=2 --node-rank=0 --nproc-per-node=1 --rdzv-backend=c10d \
        --rdzv-endpoint="127.0.0.1:$port" --rdzv-id="$name" --max-restarts=1 --no-python "$TMP/job.sh"
    listening() { (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null; }
    wait_for 10 "node 0's store" listening
    start_ddprun "${name}_1" --nnodes=2 --node-rank=1 --nproc-per-node=1 --rdzv-backend=c10d \
        --rdzv-endpoint="127.0.0.1:$port" --rdzv-id="$name" --max-restarts=1 --no-python "$TMP/job.sh"
    local p0="PID_${name}_0" p1="PID_${name}_1"
    wait_exit 30 "${!p0}"
    wait_exit 30 "${!p1}"
    assert_rc "${name}_0" 0
    assert_rc "${name}_1" 0
}

run_pair late 1.5
assert_grep "$TMP/late_1.err" "local rank 0 \(rank 1, pid [0-9]+\) failed: .*exit.*3" "node 1 names its rank's failure"
assert_grep "$TMP/late_1.err" "warning: .*node .* had finished the job and kept its result.*nothing is lost" \
    "node 1 says the failure came after the job's end"
assert_no_grep "$TMP/late_0.err" "leaving anyway" "node 0 waits for node 1 to hear the job is over"
for i in 1 2 3 4; do run_pair "close$i" 0; done
run_pair first first
assert_grep "$TMP/first_0.err" "restart 1 of 1" "the group restarted once"
assert_no_leftovers 5
echo "ok: a rank failing after the job finished elsewhere ends 0 on both nodes ('late', 4 'close', 'first')"
