#!/usr/bin/env bash
# timeout: 90
# Preemption on a real Slurm (one node on this machine:
# tests/lib/slurmbed.bash): a batch job trains under `srun ddprun
# --signals-to-handle ...,SIGUSR1`; `scancel --signal=USR1 JOB` (delivered
# to the job's steps, so to ddprun) reaches the workers, which finish their
# step, write a checkpoint and exit; the job is requeued (scontrol requeue)
# and its second run resumes from that checkpoint (a step above 0) and
# trains to the end.
#
# It skips where ddprun does not know --signals-to-handle (this branch; main
# has it, and the test passes on the two merged). SLURM_PREEMPT_SIGNAL=TERM
# runs the same path with SIGTERM, which ddprun always forwards.
source "$(dirname "$0")/../lib/train.bash"
sig=${SLURM_PREEMPT_SIGNAL:-USR1}
sigflags=()
if [ "$sig" != TERM ]; then
    # A ddprun that does not know the flag refuses the command line (exit 2).
    if ! ddprun --standalone --signals-to-handle "SIGTERM,SIG$sig" --no-python true \
        > "$SCRATCH/probe.log" 2>&1; then
        cat "$SCRATCH/probe.log"
        echo "skipped: ddprun has no --signals-to-handle yet, so SIGUSR1 cannot reach the workers"
        exit 77
    fi
    sigflags=(--signals-to-handle "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIG$sig")
fi
source "$(dirname "$0")/../lib/slurmbed.bash"
slurmbed_up
cd "$SCRATCH"
# The job's script reads these from the environment sbatch saved with the
# job, which a requeued run gets again.
export CK=$SCRATCH/ck SIGFLAGS="${sigflags[*]}" TRAIN_BIN=$BIN/ddp-train
cat > job.sh << 'EOF'
#!/bin/bash
# The first run trains until it is stopped; a requeued one resumes and
# stops 3 steps after its checkpoint.
run=${SLURM_RESTART_COUNT:-0}
echo "run $run"
steps=1000000
if [ "$run" -gt 0 ]; then
    last=$(ls "$CK" | tail -n 1)
    steps=$((10#$(echo "$last" | sed 's/ckpt-\([0-9]*\).ddpt/\1/') + 3))
fi
# shellcheck disable=SC2086 # SIGFLAGS is empty or one flag and its value
srun ddprun --nproc-per-node 2 $SIGFLAGS --no-python "$TRAIN_BIN" --data synthetic \
    --input-shape 3x16x16 --synthetic-size 100000 --threads 1 --no-eval --log-every 1 \
    --batch-size 8 --ckpt-dir "$CK" --max-steps "$steps"
echo "run $run: srun exited $?"
EOF
job=$(sbatch --parsable --requeue --open-mode=append -c 2 -o job.out job.sh)
show() { cat job.out; slurmbed_logs; }
for _ in $(seq 300); do grep -q "step 3/" job.out 2> /dev/null && break; sleep 0.1; done
grep -q "step 3/" job.out || { show; echo "FAIL: job $job did not start training"; exit 1; }
scancel --signal="$sig" "$job"
slurmbed_wait_job 40 "$job"
grep -q "run 0: srun exited" job.out || { show; echo "FAIL: the first run did not end"; exit 1; }
grep -q "stopping on SIG" job.out || { show; echo "FAIL: the workers did not stop on SIG$sig"; exit 1; }
if grep -q "did not stop within" job.out; then show; echo "FAIL: a worker needed SIGKILL"; exit 1; fi
ck=$(ls "$CK" 2> /dev/null | tail -n 1 || true)
[ -n "$ck" ] || { show; echo "FAIL: no checkpoint after SIG$sig"; exit 1; }
step=$((10#$(echo "$ck" | sed 's/ckpt-\([0-9]*\).ddpt/\1/')))
echo "SIG$sig: the workers stopped with $ck (step $step); requeueing job $job"
# A requeued job waits (BeginTime) before it may start again; now, here.
scontrol requeue "$job"
scontrol update jobid="$job" StartTime=now
slurmbed_wait_job 60 "$job"
[ "$JOB_STATE" = COMPLETED ] || { show; echo "FAIL: job $job is $JOB_STATE after the requeue"; exit 1; }
sed -n '/^run 1$/,$p' job.out > run1.out
cat run1.out
[ -s run1.out ] || { show; echo "FAIL: the job did not run again"; exit 1; }
resumed=$(sed -n 's/.*resuming from .*ckpt-[0-9]*\.ddpt: epoch [0-9]*, step \([0-9]*\).*/\1/p' run1.out | head -n 1)
[ -n "$resumed" ] && [ "$resumed" -gt 0 ] ||
    { show; echo "FAIL: the requeued run did not resume from a step above 0"; exit 1; }
grep -q "resuming from .*$ck" run1.out || { show; echo "FAIL: not resumed from $ck"; exit 1; }
grep -q "done: $((step + 3)) steps" run1.out || { show; echo "FAIL: the resumed run did not finish"; exit 1; }
sed -n "1,/^run 1$/p" job.out | tail -n 12; echo "requeued job $job resumed at step $resumed and finished"
