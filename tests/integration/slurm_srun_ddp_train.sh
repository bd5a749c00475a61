#!/usr/bin/env bash
# timeout: 60
# ddp-train started by a real srun, without ddprun and without MASTER_ADDR
# or MASTER_PORT: `srun -n 2 ddp-train` trains at world size 2, the ranks
# taking rank, world and local size from srun's variables and meeting at
# node 0 of the step on a port made from the job and step ids (one Slurm
# node on this machine: tests/lib/slurmbed.bash).
source "$(dirname "$0")/../lib/train.bash"
source "$(dirname "$0")/../lib/slurmbed.bash"
slurmbed_up
args=(--data synthetic --input-shape 3x16x16 --synthetic-size 512 --threads 1 --no-eval
      --log-every 1000 --batch-size 8 --max-steps 3)
cd "$SCRATCH"
rc=0
env -u MASTER_ADDR -u MASTER_PORT srun -n 2 --kill-on-bad-exit=1 "$BIN/ddp-train" "${args[@]}" \
    > srun.log 2>&1 || rc=$?
cat srun.log
[ $rc -eq 0 ] || { echo "FAIL: srun exited $rc"; exit 1; }
grep -q "2 ranks (srun)" srun.log || { echo "FAIL: not 2 ranks under srun"; exit 1; }
grep -q "the ranks meet at $SLURMBED_NODE:[0-9]* (the first host of SLURM_STEP_NODELIST, a port from SLURM_JOB_ID and SLURM_STEP_ID)" srun.log ||
    { echo "FAIL: no line saying where the ranks met"; exit 1; }
grep -q "done: 3 steps" srun.log || { echo "FAIL: training did not finish"; exit 1; }
echo "srun -n 2 ddp-train: ok"
