#!/usr/bin/env bash
# timeout: 240
# kill -9 on the GPU: ddprun runs one ddp-train rank on CUDA with
# checkpoints every 5 steps and --max-restarts 1; the worker is SIGKILLed
# once its checkpoint at step 10 exists. The group restarts, resumes from
# the newest checkpoint and reaches step 25 with the same weights, bit for
# bit, as a run never killed (the same algorithms are chosen: cuDNN's
# heuristics, not timings; the steps replay the same CUDA graph).
source "$(dirname "$0")/../lib/train.bash"
source "$(dirname "$0")/../lib/gpu.bash"
have_numpy || { echo "FAIL: numpy is missing on a GPU machine ($TEST_PY): the weights cannot be compared"; exit 1; }
train=(--device cuda --model resnet20 --data synthetic --input-shape 3x32x32 --synthetic-size 8192
       --batch-size 64 --max-steps 25 --ckpt-every 5 --no-eval --log-every 1 --seed 3)
clean_then_killed
agent=$AGENT
for _ in $(seq 1200); do
    [ -e "$SCRATCH/killed/ckpt-0000000010.ddpt" ] && break
    sleep 0.05
done
[ -e "$SCRATCH/killed/ckpt-0000000010.ddpt" ] || { echo "FAIL: no checkpoint at step 10"; tail -n 20 "$SCRATCH/killed.log"; exit 1; }
victim=$(pgrep -P "$agent" | head -n 1)
[ -n "$victim" ] || { echo "FAIL: no worker under agent $agent"; exit 1; }
kill -9 "$victim"
echo "killed worker $victim after the checkpoint at step 10"
wait "$agent" || { echo "FAIL: the killed run did not finish"; tail -n 30 "$SCRATCH/killed.log"; exit 1; }
grep -q "restart 1 of 1" "$SCRATCH/killed.log" || { echo "FAIL: the group did not restart"; cat "$SCRATCH/killed.log"; exit 1; }
grep -h -E "resuming from" "$SCRATCH/killed.log" | head -n 2
compare "$SCRATCH/killed" "$SCRATCH/clean" --exact || { echo "FAIL: the resumed run's weights differ from the clean run's"; exit 1; }
echo "resumed on the GPU after kill -9: weights at step 25 equal the clean run's, bit for bit"
