#!/usr/bin/env bash
# kill -9 of one worker: the agent sees the failure, stops the other
# worker, restarts the group (--max-restarts=1), the restarted workers see
# TORCHELASTIC_RESTART_COUNT=1 and finish, and ddprun exits 0. The first
# attempt's workers are all gone.
# timeout: 40
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
W_REC=$TMP/rec W_HOLD='[ "$TORCHELASTIC_RESTART_COUNT" = 0 ]' W_HOLD_MAX=30 \
    start_ddprun a --standalone --nproc-per-node=2 --max-restarts=1 --log-dir "$TMP/logs" \
    --no-python "$WORKERS/worker.sh"
wait_for 15 "2 workers to start" nrecords_at_least 2
victim=$(records | grep ' RANK=1 ' | sed 's/^pid=\([0-9]*\).*/\1/')
other=$(records | grep ' RANK=0 ' | sed 's/^pid=\([0-9]*\).*/\1/')
[ -n "$victim" ] && [ -n "$other" ] || die "no record of rank 0 and 1"
t0=$(now_ms)
kill -KILL "$victim"
wait_for 10 "the restarted workers" nrecords_at_least 4
echo "restarted in $(($(now_ms) - t0)) ms"
wait_exit 15 "$PID_a"
assert_rc a 0

records > "$TMP/all"
cat "$TMP/all"
assert_eq "$(wc -l < "$TMP/all")" 4 "worker starts (2 attempts of 2)"
assert_eq "$(grep -c ' TORCHELASTIC_RESTART_COUNT=1 ' "$TMP/all")" 2 "workers of the second attempt"
assert_eq "$(grep ' TORCHELASTIC_RESTART_COUNT=1 ' "$TMP/all" | grep -c ' TORCHELASTIC_MAX_RESTARTS=1 ')" 2 \
    "TORCHELASTIC_MAX_RESTARTS"
assert_eq "$(grep ' TORCHELASTIC_RESTART_COUNT=1 ' "$TMP/all" | sed -n 's/.* RANK=\([0-9]*\) .*/\1/p' | sort | tr '\n' ' ')" \
    "0 1 " "ranks of the second attempt"
# The second attempt's error files live under attempt_1.
assert_eq "$(grep ' TORCHELASTIC_RESTART_COUNT=1 ' "$TMP/all" | grep -c '/attempt_1/[01]/error.json ')" 2 \
    "error files of the second attempt"
assert_grep "$TMP/a.err" "local rank 1 \(rank 1, pid $victim\) failed: .*(SIGKILL|Signal 9)" \
    "the agent's report of the killed worker"
assert_grep "$TMP/a.err" "restart 1 of 1" "the agent's log of the restart"
exited "$other" || die "rank 0 of the first attempt (pid $other) still runs"
assert_no_leftovers
