#!/usr/bin/env bash
# DDPRUN_FINISHED_FILE: a worker that said its work is done (ddp-train
# does once its final state is on some node's disk) and then fails on its
# way out (a hang the watchdog kills, a crash while it exits) has still
# finished: the job ends 0, with a warning naming the worker and how it
# failed, instead of a restart of a job that is complete (or, with no
# restarts left, a failed job). Without the file, the same exit is a
# failure as before.
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
cat > "$TMP/done-then-killed.sh" << 'SH'
#!/bin/sh
[ -n "$DDPRUN_FINISHED_FILE" ] || { echo "no DDPRUN_FINISHED_FILE"; exit 2; }
echo "step 100" > "$DDPRUN_FINISHED_FILE"
kill -KILL $$
SH
cat > "$TMP/killed.sh" << 'SH'
#!/bin/sh
kill -KILL $$
SH
chmod +x "$TMP"/*.sh
start_ddprun done --standalone --nproc-per-node 2 --max-restarts 0 --no-python "$TMP/done-then-killed.sh"
wait_exit 20 "$PID_done"
assert_rc done 0
assert_grep "$TMP/done.err" "warning: local rank [01] \(rank [01], pid [0-9]+\) had finished its work \(it said so in DDPRUN_FINISHED_FILE\), then was killed on its way out \(signal 9\): counted as finished" \
    "the warning for a worker killed after it finished"
start_ddprun killed --standalone --nproc-per-node 2 --max-restarts 0 --no-python "$TMP/killed.sh"
wait_exit 20 "$PID_killed"
assert_rc killed 1
assert_no_leftovers
echo "ok: killed after saying it finished: exit 0 and a warning; killed without: a failure"
