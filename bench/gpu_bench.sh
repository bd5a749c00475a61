#!/usr/bin/env bash
# make bench-gpu: ddp-train against PyTorch on the same GPU, in the same
# run, taking turns, one rank, SGD with momentum on random data.
#
# Both sides are fed the same way, one row per way (BENCH_FEEDS):
#   device  one batch made once and kept on the GPU (ours: --fixed-batch;
#           PyTorch: a batch made with torch.randn on the device): the
#           step's speed alone;
#   host    each step's batch comes from host memory (ours: the synthetic
#           data set draws every batch anew and the input pipeline uploads
#           it; PyTorch: three pinned batches made before timing, copied
#           with non_blocking=True, which is less work than ours).
# Each side runs as its users run it: PyTorch with its defaults (TF32 in
# convolutions, channels_last, bf16 autocast, cudnn.benchmark) eager and,
# with BENCH_COMPILE=1 (default), under torch.compile; ours with
# --cudnn-benchmark, eager (--no-cuda-graph) and replaying the step as a
# CUDA graph (its default). Targets for ResNet-50 at 224, batch 256, bf16:
# ours (graph) at least 1.1x PyTorch eager and 1.0x torch.compile.
#
# Environment: BENCH_MODELS ("resnet50 resnet20"), BENCH_PRECISIONS
# ("bf16 tf32"), BENCH_FEEDS ("device host"), BENCH_STEPS (30),
# BENCH_WARMUP (10), BENCH_ROUNDS (3; the median is shown), BENCH_COMPILE
# (1), BENCH_UNFUSED (1: ours with --unfused too, what the fusion saves),
# PY (python3 with torch and CUDA).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
# Under scripts/gpu-env, PyTorch gets the library path it had before.
py=(env LD_LIBRARY_PATH="${GPU_ENV_PY_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}" "$PY")
steps=${BENCH_STEPS:-30}
warmup=${BENCH_WARMUP:-10}
rounds=${BENCH_ROUNDS:-3}
models=${BENCH_MODELS:-resnet50 resnet20}
precisions=${BENCH_PRECISIONS:-bf16 tf32}
feeds=${BENCH_FEEDS:-device host}
compile=${BENCH_COMPILE:-1}
unfused=${BENCH_UNFUSED:-1}
nvidia-smi -L > /dev/null 2>&1 || { echo "bench-gpu: no GPU (nvidia-smi -L failed)"; exit 1; }
"${py[@]}" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
    { echo "bench-gpu: $PY has no torch with CUDA"; exit 1; }
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)"
echo "torch: $("${py[@]}" -c 'import torch; print(torch.__version__)')"
echo "command: make bench-gpu (BENCH_MODELS='$models' BENCH_PRECISIONS='$precisions' BENCH_FEEDS='$feeds' BENCH_STEPS=$steps BENCH_WARMUP=$warmup BENCH_ROUNDS=$rounds BENCH_COMPILE=$compile BENCH_UNFUSED=$unfused)"

shape_of() { [ "$1" = resnet50 ] && echo 3x224x224 || echo 3x32x32; }
batch_of() { [ "$1" = resnet50 ] && echo 256 || echo 512; }

ours() { # MODEL PRECISION FEED graph|eager|unfused: img/s, or nothing
    local flags=(--cudnn-benchmark) out
    [ "$3" = device ] && flags+=(--fixed-batch)
    [ "$4" = eager ] && flags+=(--no-cuda-graph)
    [ "$4" = unfused ] && flags+=(--unfused)
    out=$(timeout 240 build/bin/ddp-train --device cuda --precision "$2" --model "$1" \
        --data synthetic --input-shape "$(shape_of "$1")" \
        --classes "$([ "$1" = resnet50 ] && echo 1000 || echo 10)" \
        --batch-size "$(batch_of "$1")" --max-steps $((steps + warmup)) \
        --throughput-warmup "$warmup" --log-every 100000 --no-eval --no-augment \
        "${flags[@]}" 2>&1)
    local ips
    ips=$(sed -n 's/.*img\/s=\([0-9.]*\).*/\1/p' <<< "$out" | tail -n1)
    if [ -n "$ips" ]; then echo "$ips"; else echo "ours $*: failed" >&2; echo "$out" | tail -n5 >&2; fi
}
theirs() { # MODEL PRECISION FEED eager|compile
    local flags=() out
    [ "$4" = compile ] && flags+=(--compile)
    out=$(timeout 400 "${py[@]}" bench/torch_gpu_train.py --model "$1" --shape "$(shape_of "$1")" \
        --batch "$(batch_of "$1")" --precision "$2" --feed "$3" --steps "$steps" \
        --warmup "$warmup" "${flags[@]}" 2>&1)
    local ips
    ips=$(sed -n 's/.*img_per_s=\([0-9.]*\).*/\1/p' <<< "$out")
    if [ -n "$ips" ]; then echo "$ips"; else echo "pytorch $*: failed" >&2; echo "$out" | tail -n5 >&2; fi
}
median() { sort -n | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]; else print "-"}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a+0 > 0 && b+0 > 0) printf "%.2fx", a/b; else print "-" }'; }

rows=()
for m in $models; do
    for p in $precisions; do
        for f in $feeds; do
            og=() ou=() oe=() te=() tc=()
            for _ in $(seq "$rounds"); do
                og+=("$(ours "$m" "$p" "$f" graph)")
                [ "$unfused" = 1 ] && ou+=("$(ours "$m" "$p" "$f" unfused)")
                te+=("$(theirs "$m" "$p" "$f" eager)")
                oe+=("$(ours "$m" "$p" "$f" eager)")
                [ "$compile" = 1 ] && tc+=("$(theirs "$m" "$p" "$f" compile)")
            done
            g=$(printf '%s\n' "${og[@]}" | grep . | median)
            e=$(printf '%s\n' "${oe[@]}" | grep . | median)
            u=$(printf '%s\n' "${ou[@]:-}" | grep . | median)
            pe=$(printf '%s\n' "${te[@]}" | grep . | median)
            pc=$(printf '%s\n' "${tc[@]:-}" | grep . | median)
            row=$(printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' "$m" "$p" "$f" "$g" \
                "$u" "$e" "$pe" "$pc" "$(ratio "$g" "$pe")" "$(ratio "$g" "$pc")")
            rows+=("$row")
            echo "$row"
        done
    done
done
printf '\nimages per second (median of %s rounds)\n\n' "$rounds"
printf '| model | precision | feed | ours, graph | ours, graph, --unfused | ours, eager | PyTorch eager | torch.compile | ours/eager | ours/compile |\n'
printf '| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
printf '%s\n' "${rows[@]}"
echo "targets (resnet50, bf16): ours/eager >= 1.10x, ours/compile >= 1.00x"
