#!/usr/bin/env bash
# An agent SIGKILLed leaves no process behind: its workers die with it
# (PR_SET_PDEATHSIG), and what they started (a shell script's children,
# in the worker's process group) is SIGKILLed by the agent's janitor,
# which tracks the workers' groups. They used to be re-parented to init
# and run on. Two workers, each a script with two children of its own.
# timeout: 40
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
cat > "$TMP/parent.sh" << 'SH'
#!/bin/sh
sleep 300 &
sleep 300 &
echo "started $LOCAL_RANK"
wait
SH
chmod +x "$TMP/parent.sh"
start_ddprun killed --standalone --nproc-per-node 2 --no-python "$TMP/parent.sh"
started() { [ "$(grep -c '^started' "$TMP/killed.out")" = 2 ]; }
wait_for 15 "both workers to start their children" started
sleep 0.2
[ "$(tagged_pids | wc -w)" -ge 7 ] || die "expected the agent, 2 workers and 4 children; found $(tagged_pids | wc -w)"
kill -KILL "$PID_killed"
wait_exit 5 "$PID_killed"
assert_no_leftovers 3
echo "ok: nothing left after the agent's SIGKILL"
