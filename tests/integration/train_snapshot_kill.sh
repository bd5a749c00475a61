#!/usr/bin/env bash
# timeout: 120
# Snapshots of every step when steps are shorter than a snapshot's write
# (tests/lib/snapshot_kill.bash, on the CPU: ResNet-20 on 3x8x8 images, a
# few milliseconds a step): a SIGKILL, the resume from the agent's memory
# losing at most the last step reported, and the final weights bit for bit
# an uninterrupted run's. A writer that let two snapshots be in flight
# lost two steps here.
source "$(dirname "$0")/../lib/train.bash"
have_numpy || { echo "skipped: numpy (python3-numpy) is not installed"; exit 77; }
train=(--device cpu --threads 1 --model resnet20 --data synthetic --input-shape 3x8x8
       --synthetic-size 8192 --batch-size 64 --max-steps 300 --ckpt-every 300 --snapshot-every 1
       --no-eval --log-every 1 --seed 3)
source "$(dirname "$0")/../lib/snapshot_kill.bash"
