#!/usr/bin/env bash
# timeout: 240
# Micro-batches on the GPU (integration/train_shrink_micro.sh checks the
# update on the CPU): a checkpoint of 2 ranks x 8 (global batch 16, made
# on the CPU) resumed by 1 rank on CUDA with --batch-size 8 trains each
# step as 2 micro-batches of 8; the steps replayed from a CUDA graph (the
# micro-batches, their sum and the loss slots in it) end with the same bits
# as the same steps run op by op, and the loss is that of all 16 samples
# (within 1e-5 of the op-by-op run's).
source "$(dirname "$0")/../lib/train.bash"
source "$(dirname "$0")/../lib/gpu.bash"
have_numpy || { echo "FAIL: numpy is missing on a GPU machine ($TEST_PY): the weights cannot be compared"; exit 1; }
args=(--model resnet20 --data synthetic --input-shape 3x32x32 --synthetic-size 4096 --seed 5
      --batch-size 8 --ckpt-every 1 --keep 40 --no-eval --log-every 1)
ddprun --standalone --nproc-per-node=2 --no-python ddp-train "${args[@]}" --device cpu --threads 1 \
    --max-steps 2 --ckpt-dir "$SCRATCH/graph" > "$SCRATCH/cpu.log" 2>&1 ||
    { cat "$SCRATCH/cpu.log"; echo "FAIL: the 2-rank CPU start"; exit 1; }
cp -r "$SCRATCH/graph" "$SCRATCH/eager"
for how in graph eager; do
    flags=()
    [ "$how" = eager ] && flags=(--no-cuda-graph)
    ddprun --standalone --nproc-per-node=1 --no-python ddp-train "${args[@]}" --device cuda \
        --max-steps 30 --ckpt-dir "$SCRATCH/$how" "${flags[@]}" > "$SCRATCH/$how.log" 2>&1 ||
        { cat "$SCRATCH/$how.log"; echo "FAIL: 1 rank on CUDA ($how)"; exit 1; }
    grep -q "each rank trains it in 2 micro-batches of at most 8" "$SCRATCH/$how.log" ||
        { cat "$SCRATCH/$how.log"; echo "FAIL: no micro-batches ($how)"; exit 1; }
done
grep -q "each step replays a CUDA graph" "$SCRATCH/graph.log" ||
    { cat "$SCRATCH/graph.log"; echo "FAIL: the micro-batched step was not recorded"; exit 1; }
compare "$SCRATCH/graph" "$SCRATCH/eager" --exact ||
    { echo "FAIL: the recorded micro-batched steps differ from the op-by-op ones"; exit 1; }
loss() { sed -n 's/.*step 30\/[0-9]* loss \([0-9.]*\).*/\1/p' "$1" | tail -n 1; }
"$TEST_PY" -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-5)' \
    "$(loss "$SCRATCH/graph.log")" "$(loss "$SCRATCH/eager.log")" ||
    { echo "FAIL: step 30's loss: $(loss "$SCRATCH/graph.log") recorded, $(loss "$SCRATCH/eager.log") op by op"; exit 1; }
echo "1 rank on CUDA, 2 micro-batches of 8: 28 steps from a CUDA graph equal to op by op, bit for bit; loss $(loss "$SCRATCH/graph.log")"
