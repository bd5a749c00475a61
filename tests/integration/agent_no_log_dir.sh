#!/usr/bin/env bash
# Without --log-dir the agent keeps the workers' logs and error files in a
# directory of its own under /tmp (/tmp/ddprun_<pid>_XXXXXX). After a run
# in which no worker failed it removes it; where one failed it keeps it, as
# torchrun keeps /tmp/torchelastic_*, and says where, before the failure
# summary: with -r 3 (output to files only) the failed rank's stderr is
# still there to read, and the error file the summary names exists.
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

# Only directories made from here on count: an older run whose pid this
# agent happens to reuse may have left one (killed, or from before the fix).
touch "$TMP/start"
made_since() { find /tmp -maxdepth 1 -name "ddprun_$1_*" -newer "$TMP/start"; }
W_FAIL_RANK=1 W_ERROR_FILE=1 W_HOLD=true W_HOLD_MAX=20 start_ddprun a --standalone \
    --nproc-per-node=2 --max-restarts=0 -r 3 --no-python "$WORKERS/worker.sh"
wait_exit 20 "$PID_a"
assert_rc a 1
assert_grep "$TMP/a.err" "RuntimeError: boom on rank 1" "the error file's message in the summary"
kept=$(made_since "$PID_a")
assert_eq "$(grep -c . <<< "$kept")" 1 "directories /tmp/ddprun_${PID_a}_* kept after a failure"
assert_grep "$TMP/a.err" "a worker failed: the workers' logs are kept in $kept/" "where the logs stay, said"
said=$(grep -n "logs are kept in" "$TMP/a.err" | cut -d: -f1)
summary=$(grep -n "FAILED$" "$TMP/a.err" | cut -d: -f1)
[ -n "$summary" ] && [ "$said" -lt "$summary" ] || die "the kept logs are said after the failure summary"
assert_grep "$kept/why_kept.txt" "A worker of job '.*' failed: ddprun \(pid $PID_a\) kept" "the note in the kept directory"
log=$(find "$kept" -path "*/attempt_0/1/stderr.log")
[ -n "$log" ] || die "no stderr.log of rank 1 in $kept: $(find "$kept" | tr '\n' ' ')"
assert_grep "$log" "rank 1 fails with exit code 1" "rank 1's stderr, kept"
error_file=$(sed -n 's/^ *error_file: \(.*\)$/\1/p' "$TMP/a.err" | grep -v N/A | head -n 1)
[ -f "$error_file" ] || die "the summary's error_file ($error_file) is gone"
W_HOLD_MAX=1 start_ddprun b --standalone --nproc-per-node=1 -r 3 --no-python "$WORKERS/worker.sh"
wait_exit 20 "$PID_b"
assert_rc b 0
assert_eq "$(made_since "$PID_b" | grep -c .)" 0 "directories /tmp/ddprun_${PID_b}_* left behind after a clean run"
assert_no_grep "$TMP/b.err" "logs are kept" "a clean run's log"
assert_no_leftovers
echo "after a failure the logs stay in /tmp, said before the summary; after a clean run nothing is left"
