#!/usr/bin/env bash
# timeout: 240
# Snapshots on the GPU (tests/lib/snapshot_kill.bash): the state downloaded
# from the GPU every step, a SIGKILL, the resume from the agent's memory
# losing at most one step, and the final weights bit for bit an
# uninterrupted run's.
source "$(dirname "$0")/../lib/train.bash"
source "$(dirname "$0")/../lib/gpu.bash"
have_numpy || { echo "FAIL: numpy is missing on a GPU machine ($TEST_PY): the weights cannot be compared"; exit 1; }
train=(--device cuda --model resnet20 --data synthetic --input-shape 3x32x32 --synthetic-size 8192
       --batch-size 64 --max-steps 300 --ckpt-every 300 --snapshot-every 1 --no-eval --log-every 1
       --seed 3)
source "$(dirname "$0")/../lib/snapshot_kill.bash"
