#!/usr/bin/env bash
# timeout: 180
# isa: AVX2 SSE41
# A checkpoint written by 4 ranks (global batch 32) resumes on 2 ranks:
# each takes 16 so the global batch stays 32, and the epoch goes on from
# the samples not yet seen (the step count carries on, the epoch ends
# where it would have); on 3 ranks, which do not divide it, it trains on.
source "$(dirname "$0")/../lib/train.bash"
args=(--model resnet20 --data synthetic --input-shape 3x16x16 --synthetic-size 320 --threads 1
      --no-eval --log-every 1 --ckpt-dir "$SCRATCH/ck" --seed 9)
ddprun --standalone --nproc-per-node=4 --no-python ddp-train "${args[@]}" --batch-size 8 \
    --max-steps 4 > "$SCRATCH/four.log" 2>&1 || { cat "$SCRATCH/four.log"; exit 1; }
ddprun --standalone --nproc-per-node=2 --no-python ddp-train "${args[@]}" --batch-size 8 \
    > "$SCRATCH/two.log" 2>&1 || { cat "$SCRATCH/two.log"; exit 1; }
grep -q "16 per rank keeps the global batch of 32" "$SCRATCH/two.log" || { cat "$SCRATCH/two.log"; exit 1; }
grep -q "resuming from .*ckpt-0000000004.ddpt" "$SCRATCH/two.log" || { cat "$SCRATCH/two.log"; exit 1; }
# 320 samples / 32 = 10 steps in the epoch: 4 before, 6 after the resume.
grep -q "epoch 1/1 step 5/10" "$SCRATCH/two.log" || { echo "did not continue at step 5 of 10"; cat "$SCRATCH/two.log"; exit 1; }
grep -q "done: 10 steps" "$SCRATCH/two.log" || { cat "$SCRATCH/two.log"; exit 1; }
if grep -q "step 11/" "$SCRATCH/two.log"; then echo "the epoch ran past its samples"; exit 1; fi
# A world size that does not divide the global batch trains on: 11 + 11 + 10
# (integration/train_elastic_uneven.sh checks the update is the same).
rc=0
ddprun --standalone --nproc-per-node=3 --no-python ddp-train "${args[@]}" --epochs 2 \
    > "$SCRATCH/three.log" 2>&1 || rc=$?
[ $rc -eq 0 ] && grep -q "3 ranks share the global batch of 32 unevenly, ranks 0-1 take 11 samples and the others 10" "$SCRATCH/three.log" &&
    grep -q "done: 20 steps" "$SCRATCH/three.log" \
    || { echo "3 ranks: exit $rc"; cat "$SCRATCH/three.log"; exit 1; }
# More ranks than the global batch has samples: refused, saying so.
rc=0
ddprun --standalone --nproc-per-node=33 --no-python ddp-train "${args[@]}" --epochs 2 \
    > "$SCRATCH/many.log" 2>&1 || rc=$?
[ $rc -ne 0 ] && grep -q "the global batch of 32 cannot give each of 33 ranks a sample" "$SCRATCH/many.log" \
    || { echo "33 ranks: exit $rc"; tail -n 20 "$SCRATCH/many.log"; exit 1; }
