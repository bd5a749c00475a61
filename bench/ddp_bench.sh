#!/usr/bin/env bash
# make bench-ddp: data-parallel training on CPUs, ddp-train against
# PyTorch's DistributedDataParallel over gloo (bench/torch_ddp_train.py,
# Debian's torch), both started by ddprun with 2 ranks on this machine, one
# thread each, random inputs of 1x28x28, per-rank batch 64, taking turns.
# Two models: ResNet-20 (0.27 M parameters: the step is compute) and
# ResNet-18 (11.2 M parameters, 45 MB of gradients a step, on such small
# inputs little compute: the step is largely the gradient all-reduce).
# Prints Markdown for docs/results.md: images per second over both ranks
# after warm-up, the median of BENCH_ROUNDS runs each, and the ratio.
# Environment: BENCH_ROUNDS (default 3), BENCH_STEPS (default 20),
# BENCH_MODELS (default "resnet20 resnet18"), BENCH_RANKS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3
rounds=${BENCH_ROUNDS:-3}
steps=${BENCH_STEPS:-20}
models=${BENCH_MODELS:-resnet20 resnet18}
n=${BENCH_RANKS:-2}
warmup=5
$py -c 'import torch.distributed' 2>/dev/null || { echo "bench-ddp needs Debian's python3-torch"; exit 1; }
for f in build/bin/ddprun build/bin/ddp-train; do [ -x "$f" ] || { echo "$f is not built (run make)"; exit 1; }; done
# Inherited launcher settings would change the runs.
unset DDPRUN_STORE_TOKEN OMP_NUM_THREADS PYTHON_EXEC
for v in $(env | sed -n 's/^\(PET_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
TMP=$(mktemp -d /tmp/ddprun-ddp-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

ours() { # model: prints img/s
    timeout 900 build/bin/ddprun --standalone --nproc-per-node "$n" --no-python build/bin/ddp-train \
        --model "$1" --data synthetic --input-shape 1x28x28 --batch-size 64 --threads 1 \
        --max-steps $((steps + warmup)) --throughput-warmup $warmup --log-every 100000 --no-eval \
        > "$TMP/out" 2>&1 || { tail -n 20 "$TMP/out" >&2; echo "ddp-train failed" >&2; exit 1; }
    sed -n 's/.*img\/s=\([0-9.]*\).*/\1/p' "$TMP/out" | tail -n1
}
theirs() {
    PYTHON_EXEC=$py timeout 900 build/bin/ddprun --standalone --nproc-per-node "$n" \
        bench/torch_ddp_train.py --model "$1" --shape 1x28x28 --batch 64 --threads 1 \
        --steps "$steps" --warmup $warmup > "$TMP/out" 2>&1 ||
        { tail -n 20 "$TMP/out" >&2; echo "PyTorch DDP failed" >&2; exit 1; }
    sed -n 's/.*img_per_s=\([0-9.]*\).*/\1/p' "$TMP/out" | tail -n1
}
median() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)), load $(cut -d' ' -f1 /proc/loadavg) at the start"
echo "- command: \`make bench-ddp\` (bench/ddp_bench.sh; BENCH_ROUNDS=$rounds BENCH_STEPS=$steps), $n ranks, 1 thread each, per-rank batch 64, 1x28x28, $warmup warm-up steps left out"
echo "- ours: \`ddprun --standalone --nproc-per-node $n --no-python build/bin/ddp-train --model M --data synthetic --input-shape 1x28x28 --batch-size 64 --threads 1 ...\`; PyTorch: \`ddprun --standalone --nproc-per-node $n bench/torch_ddp_train.py --model M\` (torch $($py -c 'import torch; print(torch.__version__)'), DistributedDataParallel, gloo)"
echo
echo "| model | ddp-train img/s | PyTorch DDP img/s | ratio |"
echo "| --- | ---: | ---: | ---: |"
for m in $models; do
    : > "$TMP/o" && : > "$TMP/t"
    for r in $(seq "$rounds"); do
        ours "$m" >> "$TMP/o"
        theirs "$m" >> "$TMP/t"
    done
    o=$(median < "$TMP/o") t=$(median < "$TMP/t")
    echo "| $m | $o | $t | $(awk -v a="$o" -v b="$t" 'BEGIN { printf "%.2fx", a / b }') |"
done
