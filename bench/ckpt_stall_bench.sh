#!/usr/bin/env bash
# make bench-ckpt-stall: how long training waits for its checkpoints when
# the disk is slow. The same run (2 ranks of ResNet-20 on synthetic
# 1x28x28, batch 32, 200 steps, a checkpoint every 5 steps, no snapshots)
# on a fast disk and on one whose every fsync takes SLOW_FSYNC_MS (default
# 100) milliseconds (bench/slow_fsync.c, loaded with LD_PRELOAD). Prints
# both wall times and the time each checkpoint cost the run. DDP_BUILD
# (default build) picks the build, to compare two.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${DDP_BUILD:-build}
ms=${SLOW_FSYNC_MS:-100}
mkdir -p build/bench
cc -O2 -shared -fPIC -o build/bench/slow_fsync.so bench/slow_fsync.c -ldl || exit 1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() { # label, LD_PRELOAD value: wall seconds
    local t0 t1
    t0=$(date +%s.%N)
    env ${2:+LD_PRELOAD="$2"} SLOW_FSYNC_MS="$ms" "$build/bin/ddprun" --standalone \
        --nproc-per-node 2 --no-python "$build/bin/ddp-train" --model resnet20 --data synthetic \
        --input-shape 1x28x28 --synthetic-size 8192 --batch-size 32 --threads 1 --max-steps 200 \
        --no-eval --log-every 1000 --snapshot-every 0 --ckpt-every 5 --keep 2 \
        --ckpt-dir "$work/$1" > "$work/$1.log" 2>&1 || { echo "ckpt-stall: the $1 run failed"; tail -n 5 "$work/$1.log"; exit 1; }
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}'
}
echo "build: $build; fsync: +$ms ms"
fast=$(run fast "")
slow=$(run slow "$PWD/build/bench/slow_fsync.so")
awk -v f="$fast" -v s="$slow" 'BEGIN{printf "fast disk %.2f s, slow disk %.2f s: %.0f ms per checkpoint (40 checkpoints)\n", f, s, (s - f) * 1000 / 40}'
