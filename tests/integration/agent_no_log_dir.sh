#!/usr/bin/env bash
# Without --log-dir the agent keeps the workers' error files in a directory
# of its own under /tmp (/tmp/ddprun_<pid>_XXXXXX) and removes it when it
# exits, after the failure summary has used them: a worker that fails with
# an error file still has its message in the summary, and nothing is left.
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

# Only directories made from here on count: an older run whose pid this
# agent happens to reuse may have left one (killed, or from before the fix).
touch "$TMP/start"
made_since() { find /tmp -maxdepth 1 -name "ddprun_$1_*" -newer "$TMP/start" | wc -l; }
W_FAIL_RANK=1 W_ERROR_FILE=1 W_HOLD=true W_HOLD_MAX=20 start_ddprun a --standalone \
    --nproc-per-node=2 --max-restarts=0 --no-python "$WORKERS/worker.sh"
wait_exit 20 "$PID_a"
assert_rc a 1
assert_grep "$TMP/a.err" "RuntimeError: boom on rank 1" "the error file's message in the summary"
left=$(made_since "$PID_a")
assert_eq "$left" 0 "directories /tmp/ddprun_${PID_a}_* left behind"
W_HOLD_MAX=1 start_ddprun b --standalone --nproc-per-node=1 --no-python "$WORKERS/worker.sh"
wait_exit 20 "$PID_b"
assert_rc b 0
left=$(made_since "$PID_b")
assert_eq "$left" 0 "directories /tmp/ddprun_${PID_b}_* left behind after a clean run"
assert_no_leftovers
echo "no log directory left in /tmp after a failed and a clean run"
