#!/usr/bin/env bash
# Restarts spent: rank 1 always exits 3; with --max-restarts=1 the group
# runs twice, then ddprun exits 1 and prints torchrun's failure summary
# naming rank 1 as the root cause with its exit code and the last lines it
# wrote to stderr.
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
W_REC=$TMP/rec W_FAIL_RANK=1 W_FAIL_CODE=3 W_HOLD=true W_HOLD_MAX=20 \
    start_ddprun a --standalone --nproc-per-node=2 --max-restarts=1 --log-dir "$TMP/logs" \
    --no-python "$WORKERS/worker.sh"
wait_exit 20 "$PID_a"
assert_rc a 1
cat "$TMP/a.err"
# Rank 1 ran in both attempts (rank 0 may be stopped before it even starts).
assert_eq "$(records | grep ' RANK=1 ' | sed -n 's/.* TORCHELASTIC_RESTART_COUNT=\([0-9]*\) .*/\1/p' | sort | tr '\n' ' ')" \
    "0 1 " "restart counts rank 1 ran with"
e=$TMP/a.err
assert_grep "$e" "worker\.sh FAILED$" "the summary's title"
assert_grep "$e" "^Root Cause \(first observed failure\):$" "the summary's root cause"
# The root cause block is what follows that line.
sed -n '/^Root Cause/,$p' "$e" > "$TMP/root"
assert_grep "$TMP/root" "^  rank      : 1 \(local_rank: 1\)$" "root cause rank"
assert_grep "$TMP/root" "^  exitcode  : 3 \(pid: [0-9]+\)$" "root cause exit code"
assert_grep "$TMP/root" "^  host      : $(hostname)$" "root cause host"
assert_grep "$TMP/root" "^  error_file: <N/A>$" "root cause error file (none written)"
assert_grep "$TMP/root" "^  time      : [0-9]{4}-[0-9]{2}-[0-9]{2}_[0-9]{2}:[0-9]{2}:[0-9]{2}$" "root cause time"
assert_grep "$TMP/root" "exited with code 3" "root cause traceback (the exit)"
# No error file (no @record): the traceback is the last lines it wrote to
# stderr, where torchrun says only "To enable traceback see ...".
assert_grep "$TMP/root" "^  traceback : exited with code 3; the last lines it wrote to stderr:$" \
    "root cause traceback (its stderr follows)"
assert_grep "$TMP/root" "^    rank 1 fails with exit code 3$" "root cause traceback (rank 1's last stderr line)"
# Rank 0 was stopped by the agent, not a failure of its own.
assert_no_grep "$e" "^  rank      : 0 " "the summary"
assert_grep "$e" "max-restarts=1" "the agent's message"
# The summary is the job's last word: the goodput line comes before it.
last_goodput=$(grep -n "goodput" "$e" | tail -n1 | cut -d: -f1)
title=$(grep -n "worker\.sh FAILED$" "$e" | tail -n1 | cut -d: -f1)
[ "$last_goodput" -lt "$title" ] || die "the goodput line (line $last_goodput) comes after the failure summary (line $title)"
assert_no_leftovers
