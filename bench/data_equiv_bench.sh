#!/usr/bin/env bash
# make bench-data-equiv: the image-folder path end to end against the IDX
# path, on the same data: Fashion-MNIST written out as a folder of PNGs
# (lossless: the same pixels; build/tests/make-images idx) and trained for
# EPOCHS epochs of ResNet-20 from each, one process with 2 threads, batch
# 128, --image-size 28 --image-recipe plain (the images taken whole, with
# the same padded random crop and flip as the IDX set). The folder's
# images are RGB (three equal channels) and normalised with ImageNet's mean
# and std, the IDX set's one channel with its own: the same data, so the
# same accuracy within noise. Also the time a step takes from each: the
# loader decodes the PNGs while the step runs, so within 5%.
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS=${EPOCHS:-1}
FM=${FM:-/usr/share/datasets/fashion-mnist}
DIR=${DIR:-build/fashion-mnist-folder}
[ -x build/tests/make-images ] || { echo "bench-data-equiv needs build/tests/make-images (make)"; exit 1; }
[ -e "$FM/train-images-idx3-ubyte.gz" ] || { echo "bench-data-equiv needs Fashion-MNIST in $FM (dataset-fashion-mnist)"; exit 1; }
if [ ! -e "$DIR/.complete" ]; then
    rm -rf "$DIR"
    build/tests/make-images idx "$DIR" "$FM/train-images-idx3-ubyte.gz" "$FM/train-labels-idx1-ubyte.gz" train
    build/tests/make-images idx "$DIR" "$FM/t10k-images-idx3-ubyte.gz" "$FM/t10k-labels-idx1-ubyte.gz" val
    touch "$DIR/.complete"
fi
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)), load $(cut -d' ' -f1 /proc/loadavg)"
echo "command: make bench-data-equiv (EPOCHS=$EPOCHS)"
echo "folder: $(find "$DIR/train" -name '*.png' | wc -l) training and $(find "$DIR/val" -name '*.png' | wc -l) test PNGs"
run() { # label args...
    local label=$1 out
    shift
    out=$(OMP_NUM_THREADS=2 build/bin/ddp-train --model resnet20 --threads 2 --batch-size 128 \
        --epochs "$EPOCHS" --seed 1 --log-every 100000 "$@" 2>&1)
    local acc ips
    acc=$(sed -n 's/.*test: loss [0-9.]* accuracy \([0-9.]*\)%.*/\1/p' <<< "$out" | tail -n 1)
    ips=$(sed -n 's/.*img\/s=\([0-9.]*\).*/\1/p' <<< "$out" | tail -n 1)
    printf '| %s | %s%% | %s |\n' "$label" "$acc" "$ips"
    echo "$acc $ips" > "$TMPF.$label"
}
TMPF=$(mktemp)
trap 'rm -f "$TMPF"*' EXIT
echo
echo "| data | test accuracy | img/s |"
echo "| --- | ---: | ---: |"
run idx --data fashion-mnist --data-dir "$FM"
run folder --data imagefolder --data-dir "$DIR" --image-size 28 --image-recipe plain
read -r a1 i1 < "$TMPF.idx"
read -r a2 i2 < "$TMPF.folder"
echo
printf 'accuracy: folder - IDX = %+.2f points; a step from the folder takes %.3fx the time of one from the IDX files\n' \
    "$(echo "$a2 - $a1" | bc -l)" "$(echo "$i1 / $i2" | bc -l)"
