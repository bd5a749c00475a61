#!/usr/bin/env bash
# timeout: 180
# ddp-train without ddprun: under Open MPI's mpirun (ranks from
# OMPI_COMM_WORLD_*, rank 0 hosting the store at MASTER_ADDR:MASTER_PORT),
# and with srun's variables (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
# SLURM_JOB_NODELIST) set by hand as srun would, since no Slurm runs here.
source "$(dirname "$0")/../lib/train.bash"
port=$(free_port)
args=(--data synthetic --input-shape 3x16x16 --synthetic-size 512 --threads 1 --no-eval
      --log-every 1000 --batch-size 8 --max-steps 3)
if command -v mpirun > /dev/null; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -np 2 --oversubscribe --mca btl self,vader --mca oob_tcp_if_include lo \
        -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" \
        "$BIN/ddp-train" "${args[@]}" > "$SCRATCH/mpi.log" 2>&1 || { cat "$SCRATCH/mpi.log"; exit 1; }
    grep -q "2 ranks (mpirun)" "$SCRATCH/mpi.log" || { echo "mpirun ranks not seen"; cat "$SCRATCH/mpi.log"; exit 1; }
    grep -q "done: 3 steps" "$SCRATCH/mpi.log" || { cat "$SCRATCH/mpi.log"; exit 1; }
    echo "mpirun: ok"
else
    echo "mpirun not installed (openmpi-bin): that part is not checked"
fi
pids=()
port2=$(free_port)
for r in 0 1; do
    env -u MASTER_ADDR SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r SLURM_NTASKS_PER_NODE=2 \
        SLURM_JOB_NODELIST="localhost" MASTER_PORT="$port2" \
        "$BIN/ddp-train" "${args[@]}" > "$SCRATCH/srun.$r.log" 2>&1 &
    pids+=($!)
    PIDS+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { cat "$SCRATCH"/srun.*.log; exit 1; }; done
grep -q "2 ranks (srun)" "$SCRATCH/srun.0.log" || { cat "$SCRATCH/srun.0.log"; exit 1; }
# An inconsistent environment is a clear error.
rc=0
RANK=3 WORLD_SIZE=2 "$BIN/ddp-train" "${args[@]}" > "$SCRATCH/bad.log" 2>&1 || rc=$?
[ $rc -ne 0 ] && grep -q "rank 3 is not below the world size 2" "$SCRATCH/bad.log" || { cat "$SCRATCH/bad.log"; exit 1; }
echo "srun-style environment: ok"
