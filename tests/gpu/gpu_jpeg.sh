#!/usr/bin/env bash
# timeout: 240
# ddp-train's --decode gpu on the GPU:
#  1. nvJPEG's samples against the host twin's (build/tests/gpu-jpeg, from
#     tests/gpu/gpu_jpeg.c): a folder of 500x375 JPEGs (ImageNet's typical
#     size), large and small ones, grayscale ones, at 224 in training
#     views, one batch, fp32 and bf16; within 0.5 levels of 255 on average
#     and 4 at most per image (bf16's own rounding left out). With chroma
#     upsampled with interpolation, as the twin and --decode cpu do it,
#     nvJPEG's samples were within 1 level of the twin's on an H200; with
#     its plain upsampling they are 2 to 3 levels off on average and up to
#     30 at edges (the figures are printed, against both);
#  2. ResNet-20 trains 6 steps on the GPU with --decode gpu, says that
#     nvJPEG decodes, and its first step's loss (which depends on the
#     inputs alone) is --decode cpu's within 0.02.
source "$(dirname "$0")/../lib/train.bash"
source "$(dirname "$0")/../lib/gpu.bash"
MK=$ROOT/build/tests/make-images
D=$SCRATCH/imgs
"$MK" pattern "$D" train 2 12 500x375 jpeg 90
"$MK" pattern "$SCRATCH/big" train 2 2 1200x900 jpeg 85
"$MK" pattern "$SCRATCH/small" train 2 2 60x44 jpeg 90
"$MK" pattern "$SCRATCH/gray" train 2 2 300x200 gray-jpeg
"$MK" pattern "$SCRATCH/png" train 2 1 300x200 png
for k in 00 01; do
    for s in big small gray png; do
        for f in "$SCRATCH/$s/train/class_$k"/*; do cp "$f" "$D/train/class_$k/$s-${f##*/}"; done
    done
done
mkdir -p "$D/val" && cp -r "$D/train/class_00" "$D/train/class_01" "$D/val/"
"$ROOT/build/tests/gpu-jpeg" "$D" 224 0.5 4 || { echo "FAIL: nvJPEG's samples are not the twin's"; exit 1; }

args=(--model resnet20 --data imagefolder --data-dir "$D" --image-size 64 --batch-size 16
      --device cuda --precision fp32 --log-every 1 --seed 5 --no-eval --epochs 3 --max-steps 6)
for d in cpu gpu; do
    ddp-train "${args[@]}" --decode "$d" > "$SCRATCH/$d.log" 2>&1 || { echo "FAIL: --decode $d"; cat "$SCRATCH/$d.log"; exit 1; }
done
grep -q "training JPEGs are decoded by nvJPEG" "$SCRATCH/gpu.log" || { echo "FAIL: nvJPEG did not decode:"; cat "$SCRATCH/gpu.log"; exit 1; }
grep -q "done: 6 steps" "$SCRATCH/gpu.log" || { echo "FAIL: not 6 steps:"; cat "$SCRATCH/gpu.log"; exit 1; }
first() { sed -n 's/.* step [0-9]*\/[0-9]* loss \([0-9.]*\) .*/\1/p' "$1" | head -n1; }
a=$(first "$SCRATCH/cpu.log") b=$(first "$SCRATCH/gpu.log")
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 0.02) }' ||
    { echo "FAIL: the first step's loss: $a with --decode cpu, $b with --decode gpu"; exit 1; }
grep -h "nvJPEG decoded" "$SCRATCH/gpu.log" || true
echo "ok: first step's loss $a (--decode cpu), $b (--decode gpu)"
