#!/usr/bin/env bash
# timeout: 240
# Checkpoints on every node, no shared file system: two agents x two
# workers, each node its own --ckpt-dir. Local rank 0 of each node writes
# its node's directory in the background, in the same format and with the
# same contents (rank 0's batch-norm statistics included), with --keep.
# Then every node is lost at once (a requeue, a new set of pods): a new job
# whose node 0 has an empty directory and node 1 a copy of the old node 1's
# resumes from node 1's newest file, says so, and ends bit for bit as a job
# never interrupted. Two nodes given one directory: one writes it, the
# other says it leaves its checkpoints to that process, and nothing fails.
source "$(dirname "$0")/../lib/train.bash"
have_numpy || { echo "skipped: numpy (python3-numpy) is not installed"; exit 77; }
TRAIN=(--model resnet20 --data synthetic --input-shape 3x8x8 --synthetic-size 4096 --threads 1
       --no-eval --log-every 100 --batch-size 16 --seed 9 --snapshot-every 0 --ckpt-every 4
       --keep 2)
files() { (cd "$1" && ls ckpt-*.ddpt 2> /dev/null | tr '\n' ' '); }

two_nodes a 2 "$SCRATCH/a.0" "$SCRATCH/a.1" --max-steps 10
[ "$(files "$SCRATCH/a.1")" = "ckpt-0000000008.ddpt ckpt-0000000010.ddpt " ] ||
    { echo "FAIL: node 1's directory holds '$(files "$SCRATCH/a.1")', not the checkpoints of steps 8 and 10"; cat "$SCRATCH/a.1.log"; exit 1; }
grep -q "rank 2: checkpoint $SCRATCH/a.1/ckpt-0000000010.ddpt (epoch 1, step 10)" "$SCRATCH/a.1.log" ||
    { echo "FAIL: node 1 did not say it wrote its checkpoint"; cat "$SCRATCH/a.1.log"; exit 1; }
compare "$SCRATCH/a.1" "$SCRATCH/a.0" --exact || { echo "FAIL: the two nodes' checkpoints differ"; exit 1; }

# Every node lost: node 0 comes back empty, node 1 with its old disk.
cp -r "$SCRATCH/a.1" "$SCRATCH/b.1"
two_nodes b 2 "$SCRATCH/b.0" "$SCRATCH/b.1" --max-steps 16
line=$(grep -h "resuming from" "$SCRATCH"/b.*.log | head -n 1)
echo "$line"
grep -q "resuming from $SCRATCH/b.1/ckpt-0000000010.ddpt: epoch 1, step 10 (disk of node " <<< "$line" ||
    { echo "FAIL: the new job did not resume from node 1's checkpoint of step 10"; cat "$SCRATCH"/b.*.log; exit 1; }
two_nodes c 2 "$SCRATCH/c.0" "$SCRATCH/c.1" --max-steps 16
compare "$SCRATCH/b.0" "$SCRATCH/c.0" --exact ||
    { echo "FAIL: the resumed job's weights differ from an uninterrupted job's"; exit 1; }

# One directory for both nodes.
two_nodes s 2 "$SCRATCH/shared" "$SCRATCH/shared" --max-steps 8
grep -q "rank 2: --ckpt-dir $SCRATCH/shared is held by pid [0-9]*.*; this node leaves its checkpoints to that process" \
    "$SCRATCH/s.1.log" || { echo "FAIL: node 1 did not say it leaves the shared directory to rank 0"; cat "$SCRATCH/s.1.log"; exit 1; }
[ "$(files "$SCRATCH/shared")" = "ckpt-0000000004.ddpt ckpt-0000000008.ddpt " ] ||
    { echo "FAIL: the shared directory holds '$(files "$SCRATCH/shared")'"; exit 1; }
echo "ok: both nodes wrote their own checkpoints; a job with every node new resumed from node 1's, bit-exact; a shared directory written once"
