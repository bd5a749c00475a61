#!/usr/bin/env bash
# make bench-data: the input pipeline alone, ours (ddp-train data-bench)
# against torchvision's ImageFolder + DataLoader (Debian's torch 1.13 and
# torchvision 0.14, PIL), on the same folder of JPEGs of ImageNet's typical
# size (about 500x375, quality 90; IMAGES of them in 10 classes, written by
# build/tests/make-images), with the reference training transforms
# (RandomResizedCrop 224 and flip, to normalised floats), batches of 64:
# images per second on one core (our --loader-threads 0: the caller builds
# each batch; their num_workers=0: the main process) and on two (our pool
# of 2, the caller helping when it waits; their 2 worker processes),
# median of ROUNDS. NVIDIA
# DALI's CPU pipeline is not run: its PyPI package needs CUDA's libraries
# and an NVIDIA driver to load. Target: at least 3x torchvision's images
# per second per core.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGES=${IMAGES:-2000}
STEPS=${STEPS:-20}
ROUNDS=${ROUNDS:-3}
py=/usr/bin/python3
$py -c 'import torchvision, PIL' 2> /dev/null || { echo "bench-data needs Debian's python3-torchvision and python3-pil"; exit 1; }
[ -x build/tests/make-images ] || { echo "bench-data needs build/tests/make-images (make)"; exit 1; }
DIR=${DIR:-build/bench-images}
if [ ! -e "$DIR/.complete-$IMAGES" ]; then
    rm -rf "$DIR"
    build/tests/make-images pattern "$DIR" train 10 $((IMAGES / 10)) 480x360 jpeg 90
    build/tests/make-images pattern "$DIR" val 10 2 480x360 jpeg 90
    touch "$DIR/.complete-$IMAGES"
fi
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)), load $(cut -d' ' -f1 /proc/loadavg)"
echo "command: make bench-data (IMAGES=$IMAGES STEPS=$STEPS ROUNDS=$ROUNDS)"
echo "images: $(find "$DIR/train" -name '*.jpg' | wc -l) JPEGs, $(du -sm "$DIR/train" | cut -f1) MB, about 480x360 to 540x405, quality 90"
ours() { # threads
    build/bin/ddp-train data-bench --data imagefolder --data-dir "$DIR" --image-size 224 \
        --batch-size 64 --loader-threads "$1" --steps "$STEPS" | sed -n 's/.*img\/s=\([0-9.]*\).*/\1/p'
}
theirs() { # workers
    $py bench/torchvision_data.py "$DIR/train" --workers "$1" --steps "$STEPS" |
        sed -n 's/.*img_per_s=\([0-9.]*\).*/\1/p'
}
median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
echo
echo "| cores | ddp-train img/s | torchvision img/s | ratio |"
echo "| ---: | ---: | ---: | ---: |"
for t in 0 2; do
    o=() th=()
    for _ in $(seq "$ROUNDS"); do o+=("$(ours "$t")"); th+=("$(theirs "$t")"); done
    mo=$(printf '%s\n' "${o[@]}" | median) mt=$(printf '%s\n' "${th[@]}" | median)
    printf '| %d | %.0f | %.0f | %.2fx |\n' "$((t > 0 ? t : 1))" "$mo" "$mt" "$(echo "$mo / $mt" | bc -l)"
done
