#!/usr/bin/env bash
# The final weights always reach the disk: local rank 0 is SIGKILLed while
# it writes the last checkpoint (its fsync made slow, bench/slow_fsync.c,
# for a wide moment to strike). The restarted group resumes from the
# snapshot in memory, which already holds the last step, so it trains
# nothing; it must still write that state to --ckpt-dir before it says
# "done" (the agent drops the memory snapshots when it exits). It once
# said "done", exited 0 and left the directory empty. Also: a run that
# resumes from a disk checkpoint of its last step does not write it again.
# timeout: 120
source "$(dirname "$0")/../lib/train.bash"
cc -O2 -shared -fPIC -o "$SCRATCH/slow_fsync.so" "$ROOT/bench/slow_fsync.c" -ldl ||
    { echo "skipped: cannot build bench/slow_fsync.c (no C compiler)"; exit 77; }
ck=$SCRATCH/ckpt
mkdir -p "$ck"
args=(--threads 1 --model resnet20 --data synthetic --input-shape 3x8x8 --synthetic-size 2048
      --batch-size 64 --epochs 1 --no-eval --snapshot-every 1 --ckpt-dir "$ck")
LD_PRELOAD=$SCRATCH/slow_fsync.so SLOW_FSYNC_MS=2000 SLOW_FSYNC_PATH=$ck \
    ddprun --standalone --nproc-per-node 2 --max-restarts 1 --no-python ddp-train "${args[@]}" \
    > "$SCRATCH/run.log" 2>&1 &
agent=$!
PIDS+=($agent)
for _ in $(seq 600); do
    ls -a "$ck" | grep -q '^\.ckpt-0*16\.tmp\.' && break
    sleep 0.05
done
ls -a "$ck" | grep -q '^\.ckpt-0*16\.tmp\.' || { cat "$SCRATCH/run.log"; echo "FAIL: the last checkpoint was never being written"; exit 1; }
writer=$(worker_of_rank 0 "$agent")
[ -n "$writer" ] || { cat "$SCRATCH/run.log"; echo "FAIL: no rank 0"; exit 1; }
kill -9 "$writer"
rc=0
wait "$agent" || rc=$?
[ $rc -eq 0 ] || { cat "$SCRATCH/run.log"; echo "FAIL: ddprun exited $rc"; exit 1; }
grep -q "resuming from .*: epoch 2, step 16 (memory of node" "$SCRATCH/run.log" ||
    { cat "$SCRATCH/run.log"; echo "FAIL: the restarted group did not resume from the last step in memory"; exit 1; }
[ -f "$ck/ckpt-0000000016.ddpt" ] ||
    { cat "$SCRATCH/run.log"; ls -la "$ck"; echo "FAIL: 'done', and the final checkpoint is not on disk"; exit 1; }
ddp-train inspect "$ck/ckpt-0000000016.ddpt" | grep -q '"global_step": *16' ||
    { echo "FAIL: the final checkpoint is not step 16"; exit 1; }
grep -q "the final state (step 16) is not on every node's disk yet: writing it" "$SCRATCH/run.log" ||
    { cat "$SCRATCH/run.log"; echo "FAIL: the final write was not said"; exit 1; }
echo "rank 0 killed while writing step 16; resumed from memory; step 16 written by the restarted group"

# Resumed from the disk's own last step: nothing to write again.
ddprun --standalone --nproc-per-node 2 --no-python ddp-train "${args[@]}" > "$SCRATCH/again.log" 2>&1 ||
    { cat "$SCRATCH/again.log"; echo "FAIL: a run at its end failed"; exit 1; }
grep -q "resuming from $ck/ckpt-0000000016.ddpt" "$SCRATCH/again.log" &&
    ! grep -q "writing it" "$SCRATCH/again.log" ||
    { cat "$SCRATCH/again.log"; echo "FAIL: the last step was written again"; exit 1; }
echo "a run resumed from its own last checkpoint writes nothing more"
