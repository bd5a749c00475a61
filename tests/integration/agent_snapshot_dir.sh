#!/usr/bin/env bash
# DDPRUN_SNAPSHOT_DIR: a directory in memory (/dev/shm) that the agent makes
# for its workers. What a worker writes there survives its restart (the
# second attempt reads what the first wrote), the directory goes when the
# job ends, one of an agent killed with SIGKILL goes at once (the agent's
# janitor), one left anyway is swept by the next agent on the machine, and
# where /dev/shm cannot be used (DDPRUN_SHM_DIR
# names a missing directory) it is on disk, with one warning.
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

shm=$TMP/shm
mkdir -p "$shm"
export DDPRUN_SHM_DIR=$shm
cat > "$TMP/w.sh" << 'SH'
#!/bin/sh
echo "dir=$DDPRUN_SNAPSHOT_DIR attempt=$TORCHELASTIC_RESTART_COUNT saw=$(cat "$DDPRUN_SNAPSHOT_DIR/state" 2> /dev/null)"
echo "from attempt $TORCHELASTIC_RESTART_COUNT" > "$DDPRUN_SNAPSHOT_DIR/state"
[ "$TORCHELASTIC_RESTART_COUNT" != 0 ]
SH
chmod +x "$TMP/w.sh"
start_ddprun restart --standalone --max-restarts 1 --no-python "$TMP/w.sh"
wait_exit 20 "$PID_restart"
assert_rc restart 0
assert_grep "$TMP/restart.out" "^dir=$shm/ddprun-snap\.$PID_restart\.[A-Za-z0-9]{6} attempt=0 saw=$" "the first attempt"
assert_grep "$TMP/restart.out" "attempt=1 saw=from attempt 0$" "the restarted worker reads what the first wrote"
assert_eq "$(find "$shm" -mindepth 1 | wc -l)" 0 "entries left in the memory root after the job"

# An agent killed with SIGKILL cannot remove its directory, nor its log
# directory in /tmp (no --log-dir): its janitor does at once, without its help (a shell waiting on a pipe the agent held;
# no child of the agent's: the agent's children are its workers alone).
start_ddprun killed --standalone --no-python sleep 60
has_dir() { compgen -G "$shm/ddprun-snap.$PID_killed.*" > /dev/null; }
wait_for 10 "the killed agent's snapshot directory" has_dir
# (the directory comes before the worker: wait for a child, then count them)
has_child() { pgrep -P "$PID_killed" > /dev/null; }
wait_for 10 "the killed agent's worker" has_child
assert_eq "$(pgrep -P "$PID_killed" | wc -l)" 1 "the agent's children (its one worker)"
kill -KILL "$PID_killed"
wait_exit 5 "$PID_killed"
gone() { ! has_dir && ! compgen -G "/tmp/ddprun_${PID_killed}_*" > /dev/null; }
wait_for 5 "the janitor to remove the killed agent's directories (in $shm and its logs in /tmp)" gone
# Without a janitor (no /bin/sh for it: a directory made by hand stands in
# for one left behind), the next agent on the machine sweeps it.
mkdir "$shm/ddprun-snap.$PID_killed.byhand"
start_ddprun next --standalone --no-python true
wait_exit 20 "$PID_next"
assert_rc next 0
assert_eq "$(find "$shm" -mindepth 1 | wc -l)" 0 "entries left after the next agent swept"

# No memory root: on disk, said once.
DDPRUN_SHM_DIR=$TMP/missing start_ddprun disk --standalone --log-dir "$TMP/logs" --no-python "$TMP/w.sh"
wait_exit 20 "$PID_disk"
assert_grep "$TMP/disk.err" "warning: cannot make a directory in $TMP/missing: No such file or directory; the workers' snapshot directory \(DDPRUN_SNAPSHOT_DIR\) is on disk: $TMP/logs/.*/snapshots/ddprun-snap" \
    "the fallback's warning"
assert_grep "$TMP/disk.out" "^dir=$TMP/logs/.*/snapshots/ddprun-snap" "the worker's directory on disk"
assert_no_leftovers
