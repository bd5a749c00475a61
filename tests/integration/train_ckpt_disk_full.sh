#!/usr/bin/env bash
# timeout: 180
# One node's full disk does not end the job: two agents x one worker, each
# node its own --ckpt-dir, node 1's a 1 MiB tmpfs (in a mount namespace of
# the test's own), too small for one checkpoint (2.2 MB). Node 1 says its
# write failed and why, keeps no more checkpoints, and training goes on;
# node 0's directory gets every checkpoint, the final one included, and
# the weights are those of a job whose disks never filled. A job whose
# only node's disk is full ends non-zero at the checkpoint after the one
# that failed (the nodes agree at each checkpoint), saying that no node
# can keep its checkpoints and why, instead of training on into nothing.
source "$(dirname "$0")/../lib/train.bash"
have_numpy || { echo "skipped: numpy (python3-numpy) is not installed"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "skipped: root is needed to mount a tmpfs"; exit 77; }
command -v unshare > /dev/null || { echo "skipped: unshare (util-linux) is not installed"; exit 77; }
unshare -m --propagation private true 2> /dev/null || { echo "skipped: cannot make a mount namespace here"; exit 77; }
TRAIN=(--model resnet20 --data synthetic --input-shape 3x8x8 --synthetic-size 4096 --threads 1
       --no-eval --log-every 100 --batch-size 16 --snapshot-every 0 --ckpt-every 4 --seed 9
       --max-steps 12)
small() { # DIR command...: the command with a 1 MiB tmpfs at DIR
    local dir=$1
    shift
    mkdir -p "$dir"
    unshare -m --propagation private sh -c 'mount -t tmpfs -o size=1m ddprun-test "$0" && exec "$@"' "$dir" "$@"
}
NODE1_WRAP=()
two_nodes fresh 1 "$SCRATCH/f.0" "$SCRATCH/f.1"
NODE1_WRAP=(small "$SCRATCH/a.1")
two_nodes full 1 "$SCRATCH/a.0" "$SCRATCH/a.1"
grep -q "rank 1: --ckpt-dir $SCRATCH/a.1 cannot keep this job's checkpoints: .*No space left on device" "$SCRATCH/full.1.log" ||
    { echo "FAIL: node 1 did not say its disk is full"; cat "$SCRATCH/full.1.log"; exit 1; }
[ -f "$SCRATCH/a.0/ckpt-0000000012.ddpt" ] || { echo "FAIL: node 0 has no final checkpoint"; ls -la "$SCRATCH/a.0"; exit 1; }
compare "$SCRATCH/a.0" "$SCRATCH/f.0" --exact || { echo "FAIL: not the weights of a job whose disks never filled"; exit 1; }

rc=0
small "$SCRATCH/only" ddp-train "${TRAIN[@]}" --ckpt-dir "$SCRATCH/only" > "$SCRATCH/only.log" 2>&1 || rc=$?
[ $rc = 1 ] && grep -q "no node can keep this job's checkpoints" "$SCRATCH/only.log" &&
    grep -q "No space left on device" "$SCRATCH/only.log" ||
    { echo "FAIL: exit $rc, without saying no node can keep the checkpoints, and why:"; cat "$SCRATCH/only.log"; exit 1; }
grep -q "done:" "$SCRATCH/only.log" && { echo "FAIL: said done"; cat "$SCRATCH/only.log"; exit 1; }
echo "ok: node 1's full disk cost nothing; alone, a full disk stopped the job: $(grep -o 'error: .*' "$SCRATCH/only.log" | head -n 1)"
