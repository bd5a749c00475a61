#!/usr/bin/env bash
# What careless or hostile workers (and worker counts) must not do to the
# agent: a --nproc-per-node beyond ddprun's maximum or the machine's limits
# is refused at once, naming the limit; SIGTERM during the start of a large
# group stops it within moments (workers are started a few per turn of the
# event loop, so signals and exits are handled meanwhile) and leaves no
# process and no temporary directory; a worker that writes 64 MiB without
# a newline costs the agent at most a line's worth of memory, its output
# cut into lines of 64 KiB; a daemon a worker starts in a session of its
# own (`setsid ... &`) is ended when the group ends, with a warning naming
# it; and the failure summary comes after the last worker was SIGKILLed,
# even when the agent's stack is small.
# timeout: 120
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

# ---- counts: ddprun's maximum, and the machine's descriptor limit ----
start_ddprun huge --standalone --nproc-per-node 100000 --no-python true
wait_exit 5 "$PID_huge"
assert_rc huge 2
assert_grep "$TMP/huge.err" "--nproc-per-node: 100000 workers on one node is more than ddprun starts \(at most 4096\)" \
    "100000 workers"
(ulimit -n 256 && DDPRUN_TEST_TAG=$TAG exec ddprun --standalone --nproc-per-node 100 --no-python true) \
    > "$TMP/nofile.out" 2> "$TMP/nofile.err"
RC=$?
assert_rc nofile 1
assert_grep "$TMP/nofile.err" "--nproc-per-node 100: 100 workers need about 664 open files in the agent, but it may open only 256 \(RLIMIT_NOFILE" \
    "100 workers under ulimit -n 256"

# ---- SIGTERM while a large group starts ----
# As many workers as the descriptor limit lets one agent start, up to 2500:
# their start takes seconds, far longer than the agent may take to stop.
hard=$(ulimit -Hn)
n=2500
[ "$hard" = unlimited ] || [ $(((hard - 64) / 6)) -ge $n ] || n=$(((hard - 64) / 6))
start_ddprun big --standalone --nproc-per-node "$n" --no-python sleep 60
wait_line 10 "$TMP/big.err" "setting OMP_NUM_THREADS"
nchildren() { [ "$(ps --ppid "$PID_big" --no-headers | wc -l)" -ge "$1" ]; }
wait_for 10 "the first workers of $n" nchildren 20
t0=$(now_ms)
kill -TERM "$PID_big"
wait_exit 30 "$PID_big"
took=$(($(now_ms) - t0))
assert_rc big 143
# The agent stopped before it started them all (before, it started all
# 2500 first, the signal waiting); how long the stop takes grows with the
# number already started (libuv looks at each one at each exit).
assert_no_grep "$TMP/big.err" "started $n workers" "the start was cut short by SIGTERM"
[ "$took" -lt 15000 ] || die "the agent took $took ms to stop after SIGTERM while starting $n workers"
assert_no_leftovers 5
! compgen -G "/tmp/ddprun_${PID_big}_*" > /dev/null || die "the agent left /tmp/ddprun_${PID_big}_* behind"

# ---- a worker's output without a newline ----
cat > "$TMP/noline.sh" << 'SH'
#!/bin/sh
head -c 67108864 /dev/zero | tr '\0' x
touch "$1.written"
sleep 2
SH
chmod +x "$TMP/noline.sh"
start_ddprun noline --standalone --nproc-per-node 1 --no-python "$TMP/noline.sh" "$TMP/noline"
wait_for 60 "the worker to write 64 MiB" test -e "$TMP/noline.written"
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$PID_noline/status")
wait_exit 10 "$PID_noline"
assert_rc noline 0
[ "$hwm" -lt 40000 ] || die "the agent's peak memory was $hwm kB while a worker wrote 64 MiB without a newline"
assert_eq "$(wc -c < "$TMP/noline.out")" $((67108864 + 1024)) "bytes on the console (64 MiB and a newline per 64 KiB)"
assert_eq "$(awk '{ if (length($0) > m) m = length($0) } END { print m }' "$TMP/noline.out")" 65536 \
    "the longest console line"

# ---- a daemon started by a worker, and the summary's place ----
cat > "$TMP/daemon.sh" << 'SH'
#!/bin/bash
if [ "$LOCAL_RANK" = 0 ]; then
    setsid sleep 3600 < /dev/null > /dev/null 2>&1 &
    sleep 0.5
    exit 3
fi
trap '' TERM
sleep 60
SH
chmod +x "$TMP/daemon.sh"
start_ddprun daemon --standalone --nproc-per-node 2 --shutdown-timeout 1 --no-python "$TMP/daemon.sh"
wait_exit 20 "$PID_daemon"
assert_rc daemon 1
assert_grep "$TMP/daemon.err" "warning: ended 1 process the workers left behind \(pid [0-9]+\)" \
    "the setsid'd daemon"
assert_no_leftovers 3
kill_line=$(grep -n "did not stop within the shutdown timeout" "$TMP/daemon.err" | cut -d: -f1)
summary_line=$(grep -n "^====" "$TMP/daemon.err" | head -n 1 | cut -d: -f1)
if [ -z "$kill_line" ] || [ -z "$summary_line" ]; then dump daemon; die "no SIGKILL warning or no summary"; fi
[ "$kill_line" -lt "$summary_line" ] || { dump daemon; die "the failure summary came before the SIGKILL of the last worker"; }
# ---- a small stack: the summary is built on the heap ----
# (It held 256 failures, 1 MiB, on the stack: a 512 KiB stack crashed it.)
(ulimit -s 512 && DDPRUN_TEST_TAG=$TAG exec ddprun --standalone --no-python false) \
    > "$TMP/stack.out" 2> "$TMP/stack.err"
RC=$?
assert_rc stack 1
assert_grep "$TMP/stack.err" "^Root Cause \(first observed failure\):" "the summary under ulimit -s 512"

echo "ok: 100000 refused; SIGTERM while starting $n workers: stopped in $took ms; 64 MiB without a newline: agent peak $hwm kB; the daemon ended"
