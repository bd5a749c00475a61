#!/usr/bin/env bash
# timeout: 180
# ddp-train on the GPU under ddprun: the NCCL communicator is set up (its
# id through the job's store when there are peers), five steps of ResNet-20
# run on the CUDA backend, the last three replayed from a CUDA graph that
# holds the step's collectives, and rank 0's output ends with the "img/s="
# line, so set-up, the step's collectives (recorded and replayed) and the
# communicator's shutdown all went through. One rank always; two as well where there are two GPUs
# (NCCL does not put two ranks on one GPU).
#
# Skips (77) on a machine without a GPU (tests/lib/gpu.bash). --timeout bounds every collective well inside this test's limit, so
# a hang shows up as the trainer's own error rather than as a kill.
source "$(dirname "$0")/../lib/train.bash"

source "$(dirname "$0")/../lib/gpu.bash"
gpus=$GPUS

args=(--device cuda --data synthetic --input-shape 3x32x32 --model resnet20 --max-steps 5
      --timeout 120)

run() { # name, ranks
    local name=$1 ranks=$2 rc=0
    "$BIN/ddprun" --standalone --nproc-per-node "$ranks" --no-python "$BIN/ddp-train" "${args[@]}" \
        > "$SCRATCH/$name.out" 2> "$SCRATCH/$name.err" || rc=$?
    local last
    last=$(tail -n 1 "$SCRATCH/$name.out")
    if [ $rc -ne 0 ] || [[ "$last" != *img/s=* ]]; then
        echo "FAIL $name: ddprun exited $rc; the last line of stdout is '$last', not the img/s= line"
        echo "--- stdout"; cat "$SCRATCH/$name.out"
        echo "--- stderr"; cat "$SCRATCH/$name.err"
        exit 1
    fi
    grep -q "from step 3 on, each step replays a CUDA graph" "$SCRATCH/$name.err" ||
        { echo "FAIL $name: the step was not recorded"; cat "$SCRATCH/$name.err"; exit 1; }
    echo "$name: $last"
}

run one-rank 1
if [ "$gpus" -ge 2 ]; then run two-ranks 2; fi

# More ranks than GPUs: --device cuda is a clear error on every rank, not
# NCCL's "duplicate GPU"; ddprun exits 1.
many=$((gpus + 1))
rc=0
"$BIN/ddprun" --standalone --nproc-per-node "$many" --no-python "$BIN/ddp-train" "${args[@]}" \
    > "$SCRATCH/many.out" 2> "$SCRATCH/many.err" || rc=$?
if [ $rc -ne 1 ] || ! grep -q "$many ranks on this node but $gpus GPU" "$SCRATCH/many.err"; then
    echo "FAIL: $many ranks on $gpus GPU(s): ddprun exited $rc without the GPU-per-rank error"
    cat "$SCRATCH/many.err"
    exit 1
fi
echo "$many ranks on $gpus GPU(s): refused with the GPU-per-rank error"
