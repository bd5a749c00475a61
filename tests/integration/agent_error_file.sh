#!/usr/bin/env bash
# Restarts spent, the worker having written torchrun's error file to
# $TORCHELASTIC_ERROR_FILE before exiting 3: the summary's root cause shows
# the error file's path and its traceback, and ddprun exits 1.
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
W_REC=$TMP/rec W_FAIL_RANK=1 W_FAIL_CODE=3 W_ERROR_FILE=1 W_HOLD=true W_HOLD_MAX=20 \
    start_ddprun a --standalone --nproc-per-node=2 --max-restarts=1 --log-dir "$TMP/logs" \
    --no-python "$WORKERS/worker.sh"
wait_exit 20 "$PID_a"
assert_rc a 1
cat "$TMP/a.err"
ef=$(records | grep ' RANK=1 ' | grep ' TORCHELASTIC_RESTART_COUNT=1 ' |
    sed -n 's/.* TORCHELASTIC_ERROR_FILE=\([^ ]*\).*/\1/p')
[ -n "$ef" ] || die "no record of rank 1's second attempt"
[ -s "$ef" ] || die "rank 1 wrote no error file at $ef"
sed -n '/^Root Cause/,$p' "$TMP/a.err" > "$TMP/root"
[ -s "$TMP/root" ] || die "no 'Root Cause' block in ddprun's stderr"
assert_grep "$TMP/root" "^  rank      : 1 \(local_rank: 1\)$" "root cause rank"
assert_grep "$TMP/root" "^  exitcode  : 3 \(pid: [0-9]+\)$" "root cause exit code"
assert_grep "$TMP/root" "^  error_file: $ef$" "root cause error file"
assert_grep "$TMP/root" "^  traceback : Traceback \(most recent call last\):$" "traceback, first line"
assert_grep "$TMP/root" '^ +File "train.py", line 7, in <module>$' "traceback, frame"
assert_grep "$TMP/root" "^ +RuntimeError: boom on rank 1$" "traceback, last line"
# The time is the error file's timestamp (epoch seconds), shown as a date.
assert_grep "$TMP/root" "^  time      : $(date +%Y-%m-%d)_" "root cause time"
assert_no_leftovers
