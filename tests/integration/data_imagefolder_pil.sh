#!/usr/bin/env bash
# timeout: 120
# --data imagefolder's evaluation view against torchvision's, made with
# PIL (tests/tools/pil_transforms.py): the same labels in the same order,
# and the same pixels. An image is decoded whole unless it is more than
# twice the view's size: within 1 level of 255 of PIL's then (float
# weights against PIL's fixed point), for RGB, grayscale and Adobe CMYK
# JPEGs and PNGs, small ones and ImageNet's typical 500x375. Larger JPEGs
# are decoded reduced by libjpeg-turbo (DCT-domain scaling, to twice the
# view) before the bilinear resize, a low-pass filter of its own: these
# synthetic images are noise and stripes, the hardest case, and stay
# within 4 levels on average (natural images, far less). --decode gpu
# decodes every JPEG whole: PIL's within 1 level, the large ones too.
source "$(dirname "$0")/../lib/train.bash"
MK=$ROOT/build/tests/make-images DUMP=$ROOT/build/tests/data-dump
[ -x "$MK" ] && [ -x "$DUMP" ] || { echo "skipped: build/tests/make-images or data-dump is not built"; exit 77; }
"$TEST_PY" -c 'import PIL, numpy' 2> /dev/null || { echo "skipped: $TEST_PY has no PIL (python3-pil) or numpy"; exit 77; }
small=$SCRATCH/small large=$SCRATCH/large
"$MK" pattern "$small" val 2 3 60x44 jpeg 90
for f in gray-jpeg cmyk-jpeg png; do
    "$MK" pattern "$SCRATCH/$f" val 2 2 50x40 "$f"
    for k in 00 01; do for x in "$SCRATCH/$f/val/class_$k"/*; do cp "$x" "$small/val/class_$k/$f-${x##*/}"; done; done
done
"$TEST_PY" "$ROOT/tests/tools/pil_transforms.py" "$DUMP" "$small" val 32 1.01 0.2
"$MK" pattern "$large" val 2 2 500x375 jpeg 90
"$TEST_PY" "$ROOT/tests/tools/pil_transforms.py" "$DUMP" "$large" val 224 1.01 0.2
"$MK" pattern "$SCRATCH/huge" val 1 2 1200x900 jpeg 90
"$TEST_PY" "$ROOT/tests/tools/pil_transforms.py" "$DUMP" "$SCRATCH/huge" val 224 40 4
# --decode gpu's path (the CPU's twin of the device decoder: every JPEG
# decoded whole, then the same filter) is PIL's within 1 level on all of
# them, the large JPEGs included; PNGs and CMYK stay on the host's path.
for set in "$small 32" "$large 224" "$SCRATCH/huge 224"; do
    read -r dir size <<< "$set"
    DATA_DUMP_DECODE=gpu "$TEST_PY" "$ROOT/tests/tools/pil_transforms.py" "$DUMP" "$dir" val "$size" 1.01 0.2
done
