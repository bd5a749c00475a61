#!/usr/bin/env bash
# timeout: 120
# isa: AVX2 SSE41
# DDP's gradients live in a shared window that the host's ranks read in
# place. Where /dev/shm has room for the communicator but not for that
# window (a container's small default, say), training goes on with the
# gradients in each rank's own memory, says so with the reason, and ends
# with the same weights bit for bit. Runs in a mount namespace of its own
# with a 4 MiB /dev/shm (needs root, or skips).
source "$(dirname "$0")/../lib/train.bash"
have_numpy || { echo "skipped: numpy (python3-numpy) is not installed"; exit 77; }
unshare --mount --propagation private true 2>/dev/null ||
    { echo "skipped: cannot make a mount namespace (needs root)"; exit 77; }
args=(--model resnet20 --data synthetic --input-shape 3x16x16 --threads 1 --no-eval
      --log-every 1000 --max-steps 3 --seed 5 --batch-size 16)
run() { # name, then a command prefix (may be empty)
    local name=$1; shift
    "$@" ddprun --standalone --nproc-per-node=2 --no-python ddp-train "${args[@]}" \
        --ckpt-dir "$SCRATCH/$name" > "$SCRATCH/$name.log" 2>&1 || { cat "$SCRATCH/$name.log"; exit 1; }
}
run shared
grep -q 'gradients in shared memory' "$SCRATCH/shared.log" || { cat "$SCRATCH/shared.log"; exit 1; }
# ResNet-20's gradients are ~1.1 MB a rank: the window needs ~2.2 MB beside
# the communicator's ~2.6 MB segment, which alone fits in 4 MiB.
run small unshare --mount --propagation private \
    bash -c 'mount -t tmpfs -o size=4M tmpfs /dev/shm && exec "$@"' small-shm
grep -q 'gradients in own memory' "$SCRATCH/small.log" || { cat "$SCRATCH/small.log"; exit 1; }
grep -q 'warning: gradients stay in each rank.s own memory.*/dev/shm' "$SCRATCH/small.log" ||
    { echo "no warning naming /dev/shm:"; cat "$SCRATCH/small.log"; exit 1; }
compare "$SCRATCH/shared" "$SCRATCH/small" --exact
