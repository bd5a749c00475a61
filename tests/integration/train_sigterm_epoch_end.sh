#!/usr/bin/env bash
# A preemption at the worst moment, an epoch's end: SIGTERM to ddprun as
# the epoch's last step is reported, when the ranks go on to evaluate and
# save. Every rank abandons the evaluation, the epoch's end is written
# (nothing trained is lost: 313 steps here), ddprun exits 143 (128 + the
# signal, as torchrun), and the next
# run evaluates that epoch first, then trains the next. It once exited 143
# with nothing on disk (the evaluation's all-reduce began after the stop's
# deadline and was aborted). Snapshots off (--snapshot-every 0), so only
# the disk can keep the work.
# timeout: 180
source "$(dirname "$0")/../lib/train.bash"
ck=$SCRATCH/ckpt
args=(--threads 1 --model resnet20 --data synthetic --input-shape 3x16x16 --synthetic-size 40000
      --batch-size 64 --epochs 2 --snapshot-every 0 --log-every 1 --ckpt-dir "$ck")
ddprun --standalone --nproc-per-node 2 --no-python ddp-train "${args[@]}" > "$SCRATCH/run.log" 2>&1 &
agent=$!
PIDS+=($agent)
for _ in $(seq 2400); do grep -q " step 313/313 " "$SCRATCH/run.log" && break; sleep 0.05; done
grep -q " step 313/313 " "$SCRATCH/run.log" || { cat "$SCRATCH/run.log"; echo "FAIL: the epoch's last step never came"; exit 1; }
kill -TERM "$agent"
rc=0
wait "$agent" || rc=$?
[ $rc -eq 143 ] || { tail -n 30 "$SCRATCH/run.log"; ls -la "$ck"; echo "FAIL: ddprun exited $rc after a SIGTERM at the epoch's end"; exit 1; }
[ -f "$ck/ckpt-0000000313.ddpt" ] || { tail -n 30 "$SCRATCH/run.log"; ls -la "$ck"; echo "FAIL: the epoch's end was not written"; exit 1; }
ran_eval=$(grep -c "^epoch 1 test:" "$SCRATCH/run.log" || true)
# The next run: epoch 1's evaluation (if the stopped one did not finish it), then epoch 2.
ddprun --standalone --nproc-per-node 2 --no-python ddp-train "${args[@]}" > "$SCRATCH/resume.log" 2>&1 ||
    { tail -n 30 "$SCRATCH/resume.log"; echo "FAIL: the next run failed"; exit 1; }
grep -q "resuming from $ck/ckpt-0000000313.ddpt" "$SCRATCH/resume.log" ||
    { cat "$SCRATCH/resume.log"; echo "FAIL: the next run did not resume from the epoch's end"; exit 1; }
if [ "$ran_eval" = 0 ]; then
    grep -q "^epoch 1 test:" "$SCRATCH/resume.log" ||
        { cat "$SCRATCH/resume.log"; echo "FAIL: epoch 1's evaluation was skipped for good"; exit 1; }
fi
grep -q "^epoch 2 test:" "$SCRATCH/resume.log" && grep -q "^done: 626 steps" "$SCRATCH/resume.log" ||
    { cat "$SCRATCH/resume.log"; echo "FAIL: epoch 2 did not run to its end"; exit 1; }
echo "SIGTERM at step 313/313: the epoch's end written, exit 143 (the stopped run $([ "$ran_eval" = 0 ] && echo "abandoned" || echo "finished") epoch 1's evaluation); the next run evaluated it and trained epoch 2"
