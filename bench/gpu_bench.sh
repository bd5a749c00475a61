#!/usr/bin/env bash
# make bench-gpu: ddp-train against PyTorch eager on the same GPU, in the
# same run, taking turns: ResNet-50 at 3x224x224 with batch 256 and
# ResNet-20 at 3x32x32 with batch 512, synthetic data, one rank. Target:
# at least 1.1x PyTorch's images per second.
# Both sides time cuDNN's algorithms (PyTorch's cudnn.benchmark = True, our
# --cudnn-benchmark) and both record nothing else: ours replays its step
# as a CUDA graph from the third step (its default), PyTorch runs eager.
# Environment: BENCH_PRECISIONS (default "bf16 tf32"), BENCH_STEPS (30),
# BENCH_WARMUP (10), BENCH_ROUNDS (3), BENCH_OURS_FLAGS (default
# --cudnn-benchmark), PY (python3 with torch and CUDA).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
steps=${BENCH_STEPS:-30}
warmup=${BENCH_WARMUP:-10}
rounds=${BENCH_ROUNDS:-3}
precisions=${BENCH_PRECISIONS:-bf16 tf32}
read -r -a our_flags <<< "${BENCH_OURS_FLAGS---cudnn-benchmark}"
nvidia-smi -L > /dev/null 2>&1 || { echo "bench-gpu: no GPU (nvidia-smi -L failed)"; exit 1; }
"$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
    { echo "bench-gpu: $PY has no torch with CUDA"; exit 1; }
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)"
echo "command: make bench-gpu (BENCH_STEPS=$steps BENCH_WARMUP=$warmup BENCH_ROUNDS=$rounds BENCH_OURS_FLAGS='${our_flags[*]}')"

ours() { # MODEL SHAPE BATCH PRECISION: img/s, or "failed"
    local out
    out=$(timeout 150 build/bin/ddp-train --device cuda --precision "$4" --model "$1" --data synthetic \
        --input-shape "$2" --classes "$([ "$1" = resnet50 ] && echo 1000 || echo 10)" \
        --batch-size "$3" --max-steps $((steps + warmup)) --throughput-warmup "$warmup" \
        --log-every 100000 --no-eval --no-augment "${our_flags[@]}" 2>&1)
    local ips
    ips=$(sed -n 's/.*img\/s=\([0-9.]*\).*/\1/p' <<< "$out" | tail -n1)
    if [ -n "$ips" ]; then echo "$ips"; else echo "failed"; echo "$out" | tail -n3 >&2; fi
}
theirs() {
    timeout 150 "$PY" bench/torch_gpu_train.py --model "$1" --shape "$2" --batch "$3" --precision "$4" \
        --steps "$steps" --warmup "$warmup" | sed -n 's/.*img_per_s=\([0-9.]*\).*/\1/p'
}
median() { sort -n | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]; else print "failed"}'; }

printf '\n| model | input | batch | precision | ddp-train img/s | PyTorch img/s | ratio | target 1.1x |\n'
printf '| --- | --- | ---: | --- | ---: | ---: | ---: | --- |\n'
for p in $precisions; do
    for cfg in "resnet50 3x224x224 256" "resnet20 3x32x32 512"; do
        set -- $cfg
        o=() t=()
        for _ in $(seq "$rounds"); do o+=("$(ours "$1" "$2" "$3" "$p")"); t+=("$(theirs "$1" "$2" "$3" "$p")"); done
        om=$(printf '%s\n' "${o[@]}" | grep -v failed | median)
        tm=$(printf '%s\n' "${t[@]}" | grep -v '^$' | median)
        ratio=$(awk -v a="$om" -v b="$tm" 'BEGIN{ if (a+0 > 0 && b+0 > 0) printf "%.2fx", a/b; else print "-" }')
        met=$(awk -v a="$om" -v b="$tm" 'BEGIN{ if (a+0 > 0 && b+0 > 0) print (a >= 1.1*b ? "met" : "NOT met"); else print "-" }')
        printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "$3" "$p" "$om" "$tm" "$ratio" "$met"
    done
done
