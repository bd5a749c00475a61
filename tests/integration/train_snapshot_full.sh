#!/usr/bin/env bash
# timeout: 120
# Snapshots when the memory is too small: the agent's memory root is a
# 1 MiB tmpfs (in a mount namespace of the test's own), too small for one
# ResNet-20 snapshot (2.2 MB). The first snapshot fails with ENOSPC; rank 0
# says so once and keeps them on disk instead (DDPRUN_SNAPSHOT_DISK_DIR);
# a worker SIGKILLed later is resumed from there, at most one step back;
# nothing is left on the tmpfs or on disk after the job.
source "$(dirname "$0")/../lib/train.bash"
[ "$(id -u)" = 0 ] || { echo "skipped: root is needed to mount a tmpfs"; exit 77; }
command -v unshare > /dev/null || { echo "skipped: unshare (util-linux) is not installed"; exit 77; }
shm=$SCRATCH/shm
mkdir -p "$shm" "$SCRATCH/logs"
unshare -m --propagation private true 2> /dev/null ||
    { echo "skipped: cannot make a mount namespace here"; exit 77; }
train=(--model resnet20 --data synthetic --input-shape 3x16x16 --synthetic-size 4096 --threads 1
       --no-eval --log-every 1 --batch-size 16 --max-steps 24 --seed 5 --snapshot-every 1)
DDPRUN_SHM_DIR=$shm unshare -m --propagation private sh -c '
    mount -t tmpfs -o size=1m ddprun-test "$0" && exec "$@"' "$shm" \
    ddprun --standalone --nproc-per-node=2 --max-restarts=1 --log-dir "$SCRATCH/logs" --no-python \
    ddp-train "${train[@]}" > "$SCRATCH/job.log" 2>&1 &
PIDS+=($!)
agent=$!
last_step() { sed -n 's/^epoch [0-9]*\/[0-9]* step \([0-9]*\)\/.*/\1/p' "$SCRATCH/job.log" | tail -n 1; }
for _ in $(seq 600); do [ "$(last_step)" -ge 8 ] 2> /dev/null && break; sleep 0.05; done
agent_pid=$(pgrep -P "$agent" -x ddprun || echo "$agent") # (sh execs ddprun: the same pid)
victim=$(pgrep -P "$agent_pid" | tail -n 1 || true)
[ -n "$victim" ] || { echo "no worker found"; cat "$SCRATCH/job.log"; exit 1; }
killed_at=$(last_step)
kill -9 "$victim"
wait "$agent" || { echo "the job failed"; cat "$SCRATCH/job.log"; exit 1; }
show() { cat "$SCRATCH/job.log"; }
grep -q "cannot keep a snapshot in $shm/ddprun-snap\..*: .*No space left on device; keeping them on disk in $SCRATCH/logs/.*/snapshots/ddprun-snap\." \
    "$SCRATCH/job.log" || { show; echo "FAIL: no warning of the fallback to disk"; exit 1; }
[ "$(grep -c "cannot keep a snapshot" "$SCRATCH/job.log")" = 1 ] || { show; echo "FAIL: the fallback said more than once"; exit 1; }
from=$(sed -n 's/.*resuming from .*: epoch [0-9]*, step \([0-9]*\) (disk of node .*)$/\1/p' "$SCRATCH/job.log" | head -n 1)
[ -n "$from" ] || { show; echo "FAIL: the restart did not resume from the snapshots on disk"; exit 1; }
[ "$from" -ge $((killed_at - 1)) ] || { show; echo "FAIL: resumed from step $from after step $killed_at was done"; exit 1; }
grep -q "done: 24 steps" "$SCRATCH/job.log" || { show; echo "FAIL: the job did not finish"; exit 1; }
left=$(find "$shm" "$SCRATCH/logs" -path '*ddprun-snap.*' 2> /dev/null | head -n 3)
[ -z "$left" ] || { echo "FAIL: left behind: $left"; exit 1; }
echo "ok: memory full at the first snapshot, kept on disk; killed after step $killed_at, resumed from step $from"
