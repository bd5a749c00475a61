#!/usr/bin/env bash
# timeout: 240
# kill -9 on the GPU: ddprun runs one ddp-train rank on CUDA with
# checkpoints every 5 steps and --max-restarts 1; the worker is SIGKILLed
# once a checkpoint of step 10 or later exists (the GPU runs a step in
# milliseconds: by the time one is seen, later ones may have replaced it,
# so many steps, for the kill to come before the end). The group restarts,
# resumes and reaches step 300 with the same weights, bit for bit, as a
# run never killed (the same algorithms are chosen: cuDNN's heuristics,
# not timings; the steps replay the same CUDA graph).
source "$(dirname "$0")/../lib/train.bash"
source "$(dirname "$0")/../lib/gpu.bash"
have_numpy || { echo "FAIL: numpy is missing on a GPU machine ($TEST_PY): the weights cannot be compared"; exit 1; }
train=(--device cuda --model resnet20 --data synthetic --input-shape 3x32x32 --synthetic-size 100000
       --batch-size 64 --max-steps 300 --ckpt-every 5 --no-eval --log-every 1 --seed 3)
clean_then_killed
agent=$AGENT
newest() { ls "$SCRATCH/killed" 2> /dev/null | sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.ddpt$/\1/p' | sort -n | tail -n 1; }
for _ in $(seq 1200); do
    [ "$(newest)" -ge 10 ] 2> /dev/null && break
    sleep 0.05
done
[ "$(newest)" -ge 10 ] 2> /dev/null || { echo "FAIL: no checkpoint of step 10 or later"; tail -n 20 "$SCRATCH/killed.log"; exit 1; }
victim=$(pgrep -P "$agent" ddp-train | head -n 1)
[ -n "$victim" ] || { echo "FAIL: no worker under agent $agent"; exit 1; }
kill -9 "$victim"
done_before=$(sed -n 's/.* step \([0-9]*\)\/.*/\1/p' "$SCRATCH/killed.log" | tail -n 1)
[ "$done_before" -lt 300 ] || { echo "FAIL: the run reached its last step before the kill"; exit 1; }
echo "killed worker $victim after step $done_before (newest checkpoint: step $(newest))"
wait "$agent" || { echo "FAIL: the killed run did not finish"; tail -n 30 "$SCRATCH/killed.log"; exit 1; }
grep -q "restart 1 of 1" "$SCRATCH/killed.log" || { echo "FAIL: the group did not restart"; cat "$SCRATCH/killed.log"; exit 1; }
grep -h -E "resuming from" "$SCRATCH/killed.log" | head -n 2
compare "$SCRATCH/killed" "$SCRATCH/clean" --exact || { echo "FAIL: the resumed run's weights differ from the clean run's"; exit 1; }
echo "resumed on the GPU after kill -9: weights at step 300 equal the clean run's, bit for bit"
