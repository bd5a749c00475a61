#!/usr/bin/env bash
# make bench-gpu-jpeg: ResNet-50 trained from a folder of JPEGs on one
# GPU, against the rate the GPU reaches fed from its own memory, and
# against PyTorch + torchvision's DataLoader on the same folder, in one
# run, one row per way:
#   device    ours, --fixed-batch: one batch kept on the GPU (the step alone)
#   cpu-all   ours, --decode cpu, the loader's threads on every core but one
#   cpu-N     ours, --decode cpu, N loader threads (BENCH_CORES: a GPU's
#             share of the cores on a node of 8 GPUs, 2 by default)
#   gpu-N     ours, --decode gpu, N loader threads (reading files, drawing
#             crops; nvJPEG decodes)
#   gpu-N-pipelined  the same with nvJPEG's hardware decoding pipelined
#             (DDP_TRAIN_NVJPEG_PIPELINED=1, nvJPEG's default; ours is
#             NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE)
#   gpu-N@F   the same with --decode-share F: the loader's threads decode
#             the other 1 - F of each batch beside nvJPEG (BENCH_SHARES,
#             "0.8" by default; "" for none)
#   torch-N   PyTorch, torchvision ImageFolder + DataLoader, N workers
#   torch-all the same with every core but one
# The target: --decode gpu at least 0.95 of device. The folder
# (BENCH_IMAGES JPEGs of about 500x375, ImageNet's typical size, made by
# build/tests/make-images) is kept in build/bench-jpeg for the next run.
#
# Environment: BENCH_IMAGES (6400), BENCH_STEPS (40), BENCH_WARMUP (10),
# BENCH_BATCH (256), BENCH_PRECISION (bf16), BENCH_CORES (2), BENCH_SHARES, PY
# (python3 with torch, torchvision and CUDA; no PyTorch rows without it),
# BENCH_ROWS (the kinds of row after device: "cpu gpu pipelined share torch",
# all by default).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
py=(env LD_LIBRARY_PATH="${GPU_ENV_PY_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}" "$PY")
images=${BENCH_IMAGES:-6400} steps=${BENCH_STEPS:-40} warmup=${BENCH_WARMUP:-10}
batch=${BENCH_BATCH:-256} prec=${BENCH_PRECISION:-bf16} few=${BENCH_CORES:-2}
shares=${BENCH_SHARES-0.8}
rows=${BENCH_ROWS:-cpu gpu pipelined share torch}
want() { [[ " $rows " == *" $1 "* ]]; }
cores=$(nproc) all=$(( $(nproc) - 1 ))
nvidia-smi -L > /dev/null 2>&1 || { echo "bench-gpu-jpeg: no GPU (nvidia-smi -L failed)"; exit 1; }
dir=build/bench-jpeg
if [ "$(cat "$dir/.made" 2>/dev/null)" != "$images" ]; then
    rm -rf "$dir"
    t0=$(date +%s)
    build/tests/make-images pattern "$dir" train 10 $((images / 10)) 500x375 jpeg 90 > /dev/null || exit 1
    build/tests/make-images pattern "$dir" val 10 2 500x375 jpeg 90 > /dev/null || exit 1
    echo "$images" > "$dir/.made"
    echo "made $images JPEGs in $(( $(date +%s) - t0 )) s ($(du -sh "$dir" | cut -f1))"
fi
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1); $cores cores"
echo "command: make bench-gpu-jpeg (BENCH_IMAGES=$images BENCH_STEPS=$steps BENCH_WARMUP=$warmup BENCH_BATCH=$batch BENCH_PRECISION=$prec BENCH_CORES=$few BENCH_SHARES='$shares' BENCH_ROWS='$rows')"
ours() { # flags...: img/s
    timeout 600 build/bin/ddp-train --device cuda --precision "$prec" --model resnet50 \
        --data imagefolder --data-dir "$dir" --batch-size "$batch" --cudnn-benchmark \
        --max-steps $((steps + warmup)) --throughput-warmup "$warmup" --log-every 100000 \
        --no-eval --epochs 100 "$@" > "$dir/../bench-jpeg.log" 2>&1
    sed -n 's/.*img\/s=\([0-9.]*\).*/\1/p' "$dir/../bench-jpeg.log" | tail -n1
}
torch() { # workers: img/s
    "${py[@]}" bench/torch_gpu_train.py --model resnet50 --shape 3x224x224 --batch "$batch" \
        --precision "$prec" --steps "$steps" --warmup "$warmup" --feed folder \
        --data-dir "$dir" --workers "$1" 2>/dev/null | sed -n 's/.*img_per_s=\([0-9.]*\).*/\1/p'
}
base=$(ours --fixed-batch)
[ -n "$base" ] || { echo "bench-gpu-jpeg: ddp-train failed:"; tail -n 20 build/bench-jpeg.log; exit 1; }
printf '%-10s %10s %8s\n' way img/s "x device"
row() { printf '%-10s %10s %8s\n' "$1" "${2:-failed}" "$([ -n "$2" ] && awk -v a="$2" -v b="$base" 'BEGIN { printf "%.3f", a / b }')"; }
row device "$base"
if want cpu; then
    row cpu-all "$(ours --decode cpu --loader-threads "$all")"
    row "cpu-$few" "$(ours --decode cpu --loader-threads "$few")"
fi
if want gpu; then
    row "gpu-$few" "$(ours --decode gpu --loader-threads "$few")"
    grep -h "nvJPEG decoded" build/bench-jpeg.log || true
fi
if want pipelined; then
    row "gpu-$few-pipelined" "$(DDP_TRAIN_NVJPEG_PIPELINED=1 ours --decode gpu --loader-threads "$few")"
    grep -h "nvJPEG decoded" build/bench-jpeg.log || true
fi
for f in $shares; do
    want share || break
    row "gpu-$few@$f" "$(ours --decode gpu --decode-share "$f" --loader-threads "$few")"
    grep -h "nvJPEG decoded" build/bench-jpeg.log || true
done
if ! want torch; then
    :
elif "${py[@]}" -c 'import torch, torchvision; assert torch.cuda.is_available()' 2> /dev/null; then
    echo "torch: $("${py[@]}" -c 'import torch, torchvision; print(torch.__version__, torchvision.__version__)')"
    row "torch-$few" "$(torch "$few")"
    row torch-all "$(torch "$all")"
else
    echo "no PyTorch rows: $PY has no torch, torchvision or CUDA"
fi
