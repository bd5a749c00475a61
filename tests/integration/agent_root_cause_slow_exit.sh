#!/usr/bin/env bash
# The root cause of a failure is the worker that died first, also when it
# is reaped after the peer it took down. Local rank 0 holds 600 MB of
# touched memory, so a SIGKILL takes it a while to exit (the kernel frees
# the memory first). Local rank 1 exits 1 the moment rank 0 is on its way
# out (the kernel's PF_EXITING flag, as a peer that lost its connection
# would), so its exit is reaped first. The agent waits for the worker that
# was already dying when the first failure came, and names it: rank 0,
# killed by SIGKILL; rank 1 "failed with it". (Before, rank 1's exit was
# judged alone at the end of its turn and named the root cause.)
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

cat > "$TMP/worker.sh" << 'EOF'
#!/usr/bin/env bash
if [ "$LOCAL_RANK" = 0 ]; then
    exec /usr/bin/python3 -c '
import sys, time
held = b"\x01" * (600 << 20)  # touched: freeing it is the slow part of an exit
print("holding", len(held), flush=True)
time.sleep(600)'
fi
# local rank 1: rank 0's pid (the agent's other child), then its flags
for _ in $(seq 200); do
    for p in $(pgrep -P "$PPID"); do
        [ "$p" = $$ ] && continue
        tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx LOCAL_RANK=0 && peer=$p
    done
    [ -n "${peer:-}" ] && break
    sleep 0.05
done
[ -n "${peer:-}" ] || { echo "no local rank 0 found"; exit 3; }
echo "watching $peer"
while read -r line < "/proc/$peer/stat" 2> /dev/null; do
    rest=${line##*) }
    read -r -a f <<< "$rest"
    (( f[6] & 4 )) && break # PF_EXITING
    [ "${f[0]}" = Z ] && break
done
exit 1
EOF
chmod +x "$TMP/worker.sh"

start_ddprun job --standalone --nproc-per-node=2 --max-restarts=0 --no-python "$TMP/worker.sh"
wait_line 20 "$TMP/job.out" "holding"
wait_line 10 "$TMP/job.out" "watching"
victim=$(worker_pid "$PID_job" LOCAL_RANK=0)
[ -n "$victim" ] || die "no local rank 0 under agent $PID_job"
kill -KILL "$victim"
wait_exit 20 "$PID_job"
assert_rc job 1
cat "$TMP/job.err"
assert_grep "$TMP/job.err" "local rank 0 \(rank 0, pid $victim\) failed: .*SIGKILL.*; stopping the group" \
    "the killed worker as the root cause"
assert_grep "$TMP/job.err" "local rank 1 \(rank 1, pid [0-9]+\) failed with it" "its peer beside it"
sed -n '/^Root Cause/,$p' "$TMP/job.err" > "$TMP/root"
assert_grep "$TMP/root" "^  rank      : 0 \(local_rank: 0\)$" "the summary's root cause"
assert_no_leftovers
