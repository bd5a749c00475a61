#!/usr/bin/env bash
# timeout: 90
# A Slurm cluster of two nodes, each a test host of the network bed (h1 and
# h2 at their own addresses: tests/lib/slurmbed.bash on tests/lib/netbed.bash).
# A batch job of two nodes runs `srun ddprun --nproc-per-node 2 ddp-train`
# with no --nnodes, --node-rank or --rdzv-* flag: each node's ddprun takes 2
# nodes, its node rank and the c10d rendezvous at h1 from Slurm, and the four
# ranks train across the hosts. Then `srun -N 2 -n 4 ddp-train` without ddprun:
# four ranks, two on each host, meeting at h1.
source "$(dirname "$0")/../lib/train.bash"
TMP=$SCRATCH
source "$(dirname "$0")/../lib/netbed.bash"
source "$(dirname "$0")/../lib/slurmbed.bash"
slurmbed_up 2
args=(--data synthetic --input-shape 3x16x16 --synthetic-size 512 --threads 1 --no-eval
      --log-every 1000 --batch-size 8 --max-steps 3)
cat > "$SCRATCH/job.sh" << EOF
#!/bin/bash
srun ddprun --nproc-per-node 2 --no-python "$BIN/ddp-train" ${args[*]}
EOF
job=$(slurmbed_cmd sbatch --parsable -N 2 --ntasks-per-node 1 -c 2 -o "$SCRATCH/job.out" \
    "$SCRATCH/job.sh")
slurmbed_wait_job 60 "$job"
show() { cat "$SCRATCH/job.out"; slurmbed_logs; }
[ "$JOB_STATE" = COMPLETED ] || { show; echo "FAIL: job $job is $JOB_STATE (exit $JOB_EXIT)"; exit 1; }
port=$((20000 + (job % 12768 * 31) % 12768))
for rank in 0 1; do
    took="ddprun: Slurm job $job, step 0, 2 nodes: took --nnodes 2 (SLURM_STEP_NUM_NODES), "
    took+="--node-rank $rank (SLURM_NODEID), --rdzv-id $job (SLURM_JOB_ID), --rdzv-backend c10d, "
    took+="--rdzv-endpoint h1:$port (the first host of SLURM_STEP_NODELIST"
    grep -qF "$took" "$SCRATCH/job.out" || { show; echo "FAIL: node $rank did not say what it took"; exit 1; }
done
grep -q "4 ranks (torchrun)" "$SCRATCH/job.out" || { show; echo "FAIL: not 4 ranks over 2 nodes"; exit 1; }
grep -q "started 2 workers on h2: node rank 1 of 2" "$SCRATCH/job.out" ||
    { show; echo "FAIL: h2 was not node rank 1"; exit 1; }
grep -q "done: 3 steps" "$SCRATCH/job.out" || { show; echo "FAIL: training did not finish"; exit 1; }
cat "$SCRATCH/job.out"
echo "sbatch -N 2 + srun ddprun: ok"
rc=0
slurmbed_cmd env -u MASTER_ADDR -u MASTER_PORT srun -N 2 -n 4 --kill-on-bad-exit=1 \
    "$BIN/ddp-train" "${args[@]}" > "$SCRATCH/srun.log" 2>&1 || rc=$?
cat "$SCRATCH/srun.log"
[ $rc -eq 0 ] || { slurmbed_logs; echo "FAIL: srun -N 2 -n 4 ddp-train exited $rc"; exit 1; }
grep -q "4 ranks (srun)" "$SCRATCH/srun.log" || { echo "FAIL: not 4 ranks under srun"; exit 1; }
grep -q "the ranks meet at h1:[0-9]*" "$SCRATCH/srun.log" || { echo "FAIL: the ranks did not meet at h1"; exit 1; }
grep -q "done: 3 steps" "$SCRATCH/srun.log" || { echo "FAIL: training did not finish"; exit 1; }
echo "srun -N 2 -n 4 ddp-train: ok"
