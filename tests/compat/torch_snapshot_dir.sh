#!/usr/bin/env bash
# DDPRUN_SNAPSHOT_DIR with a real PyTorch DDP script (examples/
# snapshot_resume.py, gloo, TORCH_PY's torch): two workers save their state
# in the agent's memory directory after every step; rank 1 is SIGKILLed
# during step 25; the group restarts and resumes from step 24 (nothing but
# the step under way is lost), and its final weights equal those of a run
# that was never killed, to the last digit printed. Nothing is left in
# /dev/shm.
# timeout: 150
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
# shellcheck source=tests/lib/torch.bash
source "$ROOT/tests/lib/torch.bash"
need_torch
export PYTHON_EXEC=$TORCH_PY
export GLOO_SOCKET_IFNAME=lo
example=$ROOT/examples/snapshot_resume.py

start_ddprun plain --standalone --nproc-per-node=2 "$example" --steps 40
wait_exit 120 "$PID_plain"
assert_rc plain 0
start_ddprun killed --standalone --nproc-per-node=2 --max-restarts=1 "$example" --steps 40 \
    --kill-at 25
wait_exit 120 "$PID_killed"
assert_rc killed 0
assert_grep "$TMP/killed.err" "local rank 1 .* failed: .*SIGKILL" "rank 1's SIGKILL"
assert_grep "$TMP/killed.out" "^resuming from step 24 \(memory of rank 0's node\)$" \
    "the restarted group's resume"
want=$(grep "^final step 39 weights" "$TMP/plain.out")
got=$(grep "^final step 39 weights" "$TMP/killed.out")
[ -n "$want" ] || { dump plain; die "the uninterrupted run printed no final weights"; }
assert_eq "$got" "$want" "the final weights after a SIGKILL and a resume from memory"
assert_no_grep "$TMP/plain.out" "^resuming" "a fresh run resumes from nothing"
left=$(find /dev/shm -maxdepth 1 -name "ddprun-snap.$PID_killed.*" 2> /dev/null)
[ -z "$left" ] || die "left in /dev/shm: $left"
assert_no_leftovers
echo "ok: $got, resumed from step 24 after a SIGKILL in step 25"
