#!/usr/bin/env bash
# timeout: 60
# A batch job on a real Slurm (one node on this machine:
# tests/lib/slurmbed.bash) whose script runs `srun ddprun --nproc-per-node 2
# ddp-train` with no --nnodes, --node-rank or --rdzv-* flag: ddprun takes
# them from the step's environment, says so in one line, and the job
# trains to the end and completes.
source "$(dirname "$0")/../lib/train.bash"
source "$(dirname "$0")/../lib/slurmbed.bash"
slurmbed_up
cat > "$SCRATCH/job.sh" << EOF
#!/bin/bash
srun ddprun --nproc-per-node 2 --no-python "$BIN/ddp-train" --data synthetic \\
    --input-shape 3x16x16 --synthetic-size 512 --threads 1 --no-eval --log-every 1000 \\
    --batch-size 8 --max-steps 3
EOF
cd "$SCRATCH"
job=$(sbatch --parsable -c 2 -o job.out job.sh)
slurmbed_wait_job 45 "$job"
cat job.out
[ "$JOB_STATE" = COMPLETED ] || { echo "FAIL: job $job is $JOB_STATE (exit $JOB_EXIT)"; exit 1; }
took="ddprun: Slurm job $job, step 0, 1 node: took --nnodes 1 (SLURM_STEP_NUM_NODES)"
took+=", --node-rank 0 (SLURM_NODEID), --rdzv-id $job (SLURM_JOB_ID)"
grep -qF "$took" job.out || { echo "FAIL: no line saying what ddprun took from Slurm"; exit 1; }
grep -q "2 ranks (torchrun)" job.out || { echo "FAIL: the workers were not 2 ranks under ddprun"; exit 1; }
grep -q "done: 3 steps" job.out || { echo "FAIL: training did not finish"; exit 1; }
echo "sbatch + srun ddprun: ok"
