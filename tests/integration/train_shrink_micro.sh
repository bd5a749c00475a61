#!/usr/bin/env bash
# timeout: 120
# isa: AVX2 SSE41
# A job that shrinks past its --batch-size trains each rank's share in
# micro-batches of at most that many, in the memory it started with, and
# the update stays the same: 2 ranks x 8 train 2 steps; then the job goes
# on either on 2 ranks, or on 1, whose share of 16 it trains as 2
# micro-batches of 8. Micro-batch j holds the rank's samples j, j + 2, ...,
# which is what rank j held on 2 ranks, so batch norm normalises over the
# same groups, and the gradients summed, 0.5 g0 + 0.5 g1, are the 2 ranks'
# (g0 + g1) / 2 to the bit: after step 4 the weights and the momentum are
# the 2-rank run's, bit for bit. (The running statistics differ: updated
# after each micro-batch.) Without micro-batches, 1 rank's batch norm over
# all 16 moves the weights by 1e-1 and the momentum by 0.9 (relative).
source "$(dirname "$0")/../lib/train.bash"
have_numpy || { echo "skipped: numpy (python3-numpy) is not installed"; exit 77; }
args=(--model resnet20 --data synthetic --input-shape 3x8x8 --synthetic-size 256 --threads 1
      --no-eval --log-every 1 --seed 5 --batch-size 8 --ckpt-every 1 --keep 10)
run() { # NAME RANKS MAX-STEPS
    ddprun --standalone --nproc-per-node="$2" --no-python ddp-train "${args[@]}" --max-steps "$3" \
        --ckpt-dir "$SCRATCH/$1" > "$SCRATCH/$1.$3.log" 2>&1 ||
        { cat "$SCRATCH/$1.$3.log"; echo "FAIL: $1 ($2 ranks, to step $3)"; exit 1; }
}
run two 2 2
cp -r "$SCRATCH/two" "$SCRATCH/one"
run two 2 4
run one 1 4
grep -q "a share of 16 is more than --batch-size 8: each rank trains it in 2 micro-batches of at most 8" \
    "$SCRATCH/one.4.log" || { cat "$SCRATCH/one.4.log"; echo "FAIL: the micro-batches were not said"; exit 1; }
grep -q "resuming from .*ckpt-0000000002.ddpt" "$SCRATCH/one.4.log" ||
    { cat "$SCRATCH/one.4.log"; echo "FAIL: 1 rank did not resume from step 2"; exit 1; }
compare "$SCRATCH/two/ckpt-0000000004.ddpt" "$SCRATCH/one/ckpt-0000000004.ddpt" --tensor params \
    --tensor momentum --exact ||
    { echo "FAIL: 1 rank's micro-batches (8 + 8) did not make the 2 ranks' steps"; exit 1; }
echo "2 ranks x 8 -> 1 rank, 2 micro-batches of 8: steps 3 and 4 the 2 ranks' own, bit for bit"
