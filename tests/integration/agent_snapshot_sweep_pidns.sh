#!/usr/bin/env bash
# The sweep of snapshot directories left by dead agents does not judge by
# pid alone: agents in separate PID namespaces that share the memory root
# (containers with the host's IPC, Kubernetes pods) see each other's pids
# as missing. Agent A runs in this namespace; agent B starts in a new PID
# namespace of its own, where A's pid does not exist, and sweeps at its
# start: A's live directory must stay (it used to be deleted: kill(pid, 0)
# said ESRCH). A directory whose agent is dead is still swept.
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
[ "$(id -u)" = 0 ] || skip "skipped: root is needed for a PID namespace"
command -v unshare > /dev/null || skip "skipped: unshare (util-linux) is not installed"
unshare -pf --mount-proc true 2> /dev/null || skip "skipped: cannot make a PID namespace here"
shm=$TMP/shm
mkdir -p "$shm"
export DDPRUN_SHM_DIR=$shm
start_ddprun a --standalone --no-python sleep 60
has_dir() { compgen -G "$shm/ddprun-snap.$PID_a.*" > /dev/null; }
wait_for 10 "agent A's snapshot directory" has_dir
dir=$(compgen -G "$shm/ddprun-snap.$PID_a.*")
echo "kept by A: $dir" > "$dir/state"
# B, in a PID namespace where A's pid is nobody's
DDPRUN_TEST_TAG=$TAG unshare -pf --mount-proc ddprun --standalone --no-python true > "$TMP/b.out" 2> "$TMP/b.err"
[ -f "$dir/state" ] || die "agent B (another PID namespace) deleted agent A's live snapshot directory"
# A dies (SIGKILL): its janitor removes its directory at once. One left
# anyway (no janitor ran: made by hand, its owner file there and no one
# holding it) goes at the next agent's sweep, from a namespace of its own.
kill -KILL "$PID_a"
wait_exit 5 "$PID_a"
gone() { ! has_dir; }
wait_for 5 "A's janitor to remove its directory" gone
left=$shm/ddprun-snap.$PID_a.byhand
mkdir "$left" && : > "$left/.owner"
DDPRUN_TEST_TAG=$TAG unshare -pf --mount-proc ddprun --standalone --no-python true > "$TMP/c.out" 2> "$TMP/c.err"
[ ! -e "$left" ] || die "the directory of dead agent A was not swept: $(ls -la "$left")"
assert_no_leftovers
echo "ok: a live agent's directory survived another PID namespace's sweep; a dead one's was swept"
