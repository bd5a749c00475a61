#!/usr/bin/env bash
# timeout: 180
# --data imagefolder: a folder of images in torchvision's ImageFolder layout
# (written by build/tests/make-images: RGB, grayscale and Adobe CMYK JPEGs,
# PNGs, upper-case extensions, a nested folder) trains and evaluates on
# val/; the batches are the same whatever --loader-threads (the weights
# after 6 steps are equal byte for byte); and every kind of bad input is an
# error naming the file: a truncated JPEG, a JPEG with a bogus header, a
# damaged PNG, a text file called .jpg, an empty file, an image format
# torchvision reads and ddp-train does not, an empty class folder, no
# train/, no --data-dir; with --skip-bad-images they are replaced by the
# next good image, the first said and all counted at each epoch's end.
source "$(dirname "$0")/../lib/train.bash"
MK=$ROOT/build/tests/make-images
[ -x "$MK" ] || { echo "skipped: build/tests/make-images is not built"; exit 77; }
D=$SCRATCH/imgs
"$MK" pattern "$D" train 3 12 60x44 jpeg 90
"$MK" pattern "$D" val 3 4 60x44 png
for f in gray-jpeg cmyk-jpeg png; do "$MK" pattern "$SCRATCH/$f" train 3 2 50x40 "$f"; done
for k in 00 01 02; do
    cp "$SCRATCH/gray-jpeg/train/class_$k/img_00000.jpg" "$D/train/class_$k/gray.JPG"
    cp "$SCRATCH/cmyk-jpeg/train/class_$k/img_00001.jpg" "$D/train/class_$k/cmyk.jpeg"
    cp "$SCRATCH/png/train/class_$k/img_00000.png" "$D/train/class_$k/rgb.PNG"
done
mkdir -p "$D/train/class_01/more"
cp "$SCRATCH/png/train/class_01/img_00001.png" "$D/train/class_01/more/nested.png"
echo "not an image, and not named like one" > "$D/train/class_02/README.txt"
args=(--model resnet20 --data imagefolder --data-dir "$D" --image-size 32 --batch-size 8
      --threads 1 --log-every 1000 --seed 5)

# 1. It trains on the 3 x 12 + 3 x 3 + 1 training images and tests on the 12 of val/.
ddp-train "${args[@]}" --epochs 2 > "$SCRATCH/out" 2>&1 || { cat "$SCRATCH/out"; exit 1; }
grep -q "done: 12 steps" "$SCRATCH/out" || { echo "not 2 epochs of 6 steps (46 images, 8 a step):"; cat "$SCRATCH/out"; exit 1; }
grep -qE "epoch 2 test: loss [0-9.]+ accuracy [0-9.]+% \(12 images\)" "$SCRATCH/out" ||
    { echo "no test on val/'s 12 images:"; cat "$SCRATCH/out"; exit 1; }

# 2. The batches do not depend on the loader's threads.
for n in 1 4; do
    ddp-train "${args[@]}" --no-eval --max-steps 6 --loader-threads "$n" --ckpt-dir "$SCRATCH/ck$n" \
        > "$SCRATCH/out$n" 2>&1 || { cat "$SCRATCH/out$n"; exit 1; }
done
cmp "$SCRATCH/ck1/ckpt-0000000006.ddpt" "$SCRATCH/ck4/ckpt-0000000006.ddpt" ||
    { echo "the weights after 6 steps differ between --loader-threads 1 and 4"; exit 1; }

# 3. Bad input: an error naming the file, for each.
fails() { # file-to-add contents-command text
    local rc=0
    ddp-train "${args[@]}" --no-eval --epochs 1 > "$SCRATCH/out" 2>&1 || rc=$?
    if [ "$rc" -ne 1 ] || ! grep -qF -- "$1" "$SCRATCH/out"; then
        echo "exit $rc (wanted 1) without '$1':"; cat "$SCRATCH/out"; exit 1
    fi
}
c0=$D/train/class_00
head -c 400 "$c0/img_00003.jpg" > "$c0/cut.jpg"
fails "$c0/cut.jpg: a truncated JPEG image"
rm "$c0/cut.jpg"
printf '\xff\xd8\xff\xc0\x00\x02\xff\xd9' > "$c0/bogus.jpg"
fails "$c0/bogus.jpg: a damaged JPEG image"
rm "$c0/bogus.jpg"
{ printf '\x89PNG\r\n\x1a\n'; head -c 200 /dev/zero; } > "$c0/bad.png"
fails "$c0/bad.png: a damaged PNG image"
rm "$c0/bad.png"
echo "hello" > "$c0/text.jpg"
fails "$c0/text.jpg is not a JPEG or PNG image"
rm "$c0/text.jpg"
: > "$c0/empty.png"
fails "$c0/empty.png is not a JPEG or PNG image (it is empty)"
rm "$c0/empty.png"
: > "$c0/photo.webp"
fails "$c0/photo.webp: ddp-train reads JPEG and PNG images only"
rm "$c0/photo.webp"
mkdir "$D/train/class_03"
fails "the class folder $D/train/class_03 holds no .jpg, .jpeg or .png image"
rmdir "$D/train/class_03"
rc=0
ddp-train "${args[@]/$D/$SCRATCH/nowhere}" > "$SCRATCH/out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -qF "$SCRATCH/nowhere/train: no such folder" "$SCRATCH/out" ||
    { echo "no train/: exit $rc"; cat "$SCRATCH/out"; exit 1; }
rc=0
ddp-train --data imagefolder --threads 1 > "$SCRATCH/out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -qF -- "--data imagefolder needs --data-dir DIR" "$SCRATCH/out" ||
    { echo "no --data-dir: exit $rc"; cat "$SCRATCH/out"; exit 1; }
# --skip-bad-images: the damaged files are replaced, said once, counted at each epoch's end.
head -c 400 "$c0/img_00003.jpg" > "$c0/cut.jpg"
echo "hello" > "$D/val/class_01/text.png"
ddp-train "${args[@]}" --epochs 2 --skip-bad-images > "$SCRATCH/out" 2>&1 || { cat "$SCRATCH/out"; exit 1; }
[ "$(grep -c "skipping a sample: .*: a truncated JPEG image\|skipping a sample: .* is not a JPEG or PNG image" "$SCRATCH/out")" -le 2 ] &&
    grep -q "skipping a sample: " "$SCRATCH/out" &&
    grep -q "epoch 1: 1 draw of bad training images and 1 of bad test images skipped (--skip-bad-images)" "$SCRATCH/out" &&
    grep -q "epoch 2: 1 draw of bad training images and 1 of bad test images skipped (--skip-bad-images)" "$SCRATCH/out" ||
    { echo "--skip-bad-images did not say what it skipped:"; cat "$SCRATCH/out"; exit 1; }
rm "$c0/cut.jpg" "$D/val/class_01/text.png"
# and after all that, the folder still trains
ddp-train "${args[@]}" --no-eval --max-steps 2 > "$SCRATCH/out" 2>&1 || { cat "$SCRATCH/out"; exit 1; }
echo "ok: trained and tested on the folder; bit-exact across loader threads; 9 kinds of bad input named"
