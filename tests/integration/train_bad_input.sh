#!/usr/bin/env bash
# timeout: 180
# Bad input to ddp-train gets a clear error naming the problem, and nothing
# is overwritten: a missing data set, a wrong --input-shape, an unknown
# model, a checkpoint from another model, a truncated checkpoint. A FIFO
# where a checkpoint is expected never hangs a run or `inspect` (an open()
# of a FIFO waits for a writer): given to `inspect` it is refused, and in
# --ckpt-dir it is skipped with a warning, also by --keep's pruning.
source "$(dirname "$0")/../lib/train.bash"
fails() { # expected exit status, text the error must contain, args...
    local want=$1 text=$2 rc=0; shift 2
    ddp-train "$@" > "$SCRATCH/out" 2>&1 || rc=$?
    if [ "$rc" -ne "$want" ] || ! grep -qF -- "$text" "$SCRATCH/out"; then
        echo "ddp-train $* exited $rc (wanted $want) without '$text':"; cat "$SCRATCH/out"; exit 1
    fi
}
quick=(--threads 1 --no-eval --log-every 1000 --batch-size 8)
fails 1 "cannot open $SCRATCH/nowhere/train-images-idx3-ubyte" "${quick[@]}" --data-dir "$SCRATCH/nowhere"
fails 2 "--input-shape: '3x32' is not CxHxW" --data synthetic --input-shape 3x32
fails 2 "--input-shape: '0x8x8' is not CxHxW" --data synthetic --input-shape 0x8x8
fails 1 "unknown model 'resnet7'" "${quick[@]}" --model resnet7
# --data's names are the format table's (worker/data/ds_table.c), as is --help's list.
fails 2 "--data: 'imagenet' is not fashion-mnist, mnist, cifar10, synthetic or imagefolder" --data imagenet
ddp-train --help > "$SCRATCH/help"
tr -s ' \n' ' ' < "$SCRATCH/help" | grep -qF -- "fashion-mnist (default), mnist, cifar10, synthetic or imagefolder" ||
    { echo "--help does not list the data sets:"; cat "$SCRATCH/help"; exit 1; }
fails 2 "unknown option '--bogus'" --bogus 3
# Options are not abbreviated: a near miss is refused with the one meant
# (were it taken, the missing data set would end the run at once).
fails 2 "unknown option '--epoch' (did you mean --epochs?)" --epoch 3 --data-dir "$SCRATCH/nowhere"
fails 2 "--batch-size: 'many' is not a whole number from 1 to 1048576" --batch-size many
fails 2 "--epochs: '2.5' is not a whole number" --epochs 2.5
fails 2 "--lr: 'fast' is not a number from 0 to 1000" --lr fast
fails 2 "--device: 'tpu' is not auto, cpu or cuda" --device tpu
fails 1 "a batch of 3000 per rank is too large for resnet18 on these inputs: at most 2674" \
    --model resnet18 --data synthetic --input-shape 3x224x224 --batch-size 3000 --threads 1 --no-eval

# A checkpoint of another model: refused, and left as it was.
synth=(--data synthetic --input-shape 3x16x16 --synthetic-size 256 "${quick[@]}")
ddp-train "${synth[@]}" --model resnet20 --max-steps 2 --ckpt-dir "$SCRATCH/ck" > "$SCRATCH/out" 2>&1
before=$(sha256sum "$SCRATCH"/ck/*.ddpt)
fails 1 "holds another job's checkpoints (ckpt-0000000002.ddpt: resnet20 on 3x16x16 inputs" "${synth[@]}" --model resnet32 --max-steps 3 --ckpt-dir "$SCRATCH/ck"
[ "$before" = "$(sha256sum "$SCRATCH"/ck/*.ddpt)" ] || { echo "the checkpoint changed"; exit 1; }

# A truncated newest checkpoint: reported, and the previous one is used.
ddp-train "${synth[@]}" --model resnet20 --max-steps 4 --ckpt-every 2 --ckpt-dir "$SCRATCH/tr" > "$SCRATCH/out" 2>&1
newest=$SCRATCH/tr/ckpt-0000000004.ddpt
[ -e "$newest" ] || { echo "no checkpoint at step 4"; ls "$SCRATCH/tr"; exit 1; }
truncate -s 1000 "$newest"
ddp-train "${synth[@]}" --model resnet20 --max-steps 5 --ckpt-dir "$SCRATCH/tr" > "$SCRATCH/out" 2>&1 \
    || { cat "$SCRATCH/out"; exit 1; }
grep -q "ckpt-0000000004.ddpt" "$SCRATCH/out" && grep -q "resuming from .*ckpt-0000000002.ddpt" "$SCRATCH/out" \
    || { echo "the truncated checkpoint was not reported and skipped:"; cat "$SCRATCH/out"; exit 1; }

# Only a truncated checkpoint: an error, and it stays (nothing overwritten).
mkdir "$SCRATCH/only"
cp "$newest" "$SCRATCH/only/"
fails 1 "ckpt-0000000004.ddpt" "${synth[@]}" --model resnet20 --max-steps 5 --ckpt-dir "$SCRATCH/only"
[ "$(stat -c %s "$SCRATCH/only/ckpt-0000000004.ddpt")" = 1000 ] || { echo "the truncated file changed"; exit 1; }
[ "$(ls "$SCRATCH/only" | wc -l)" = 1 ] || { echo "a checkpoint was written over a corrupt one"; ls "$SCRATCH/only"; exit 1; }

# A FIFO given to inspect: refused at once, named.
mkfifo "$SCRATCH/fifo.ddpt"
rc=0
timeout -k 5 10 ddp-train inspect "$SCRATCH/fifo.ddpt" > "$SCRATCH/out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -qF "checkpoint $SCRATCH/fifo.ddpt is a FIFO, not a checkpoint file" "$SCRATCH/out" ||
    { echo "inspect of a FIFO exited $rc (124: it hung):"; cat "$SCRATCH/out"; exit 1; }
# A FIFO as the newest ckpt-N in --ckpt-dir: skipped with a warning, by
# inspect and by a resuming run, which resumes from the valid one before it;
# pruning older checkpoints (--keep 1 at step 4 and 6) leaves it alone.
mkdir "$SCRATCH/ff"
cp "$SCRATCH/tr/ckpt-0000000002.ddpt" "$SCRATCH/ff/"
mkfifo "$SCRATCH/ff/ckpt-0000000003.ddpt"
timeout -k 5 10 ddp-train inspect "$SCRATCH/ff" > "$SCRATCH/out" 2> "$SCRATCH/err" ||
    { echo "inspect of a directory with a FIFO failed ($?):"; cat "$SCRATCH/err"; exit 1; }
grep -q '"global_step": 2,' "$SCRATCH/out" &&
    grep -qF "ckpt-0000000003.ddpt in $SCRATCH/ff is a FIFO, not a checkpoint file: skipped" "$SCRATCH/err" ||
    { cat "$SCRATCH/out" "$SCRATCH/err"; exit 1; }
timeout -k 5 30 ddp-train "${synth[@]}" --model resnet20 --max-steps 6 --ckpt-every 2 --keep 1 \
    --ckpt-dir "$SCRATCH/ff" > "$SCRATCH/out" 2>&1 ||
    { echo "a run resuming beside a FIFO exited $? (124: it hung):"; cat "$SCRATCH/out"; exit 1; }
grep -qF "ckpt-0000000003.ddpt in $SCRATCH/ff is a FIFO, not a checkpoint file: skipped" "$SCRATCH/out" &&
    grep -q "resuming from .*ckpt-0000000002.ddpt" "$SCRATCH/out" ||
    { echo "the FIFO was not skipped with a warning:"; cat "$SCRATCH/out"; exit 1; }
[ -p "$SCRATCH/ff/ckpt-0000000003.ddpt" ] && [ -e "$SCRATCH/ff/ckpt-0000000006.ddpt" ] ||
    { echo "the FIFO or the newest checkpoint is gone:"; ls -la "$SCRATCH/ff"; exit 1; }
# Only a FIFO: no checkpoint, so a fresh start (with the warning).
mkdir "$SCRATCH/onlyfifo"
mkfifo "$SCRATCH/onlyfifo/ckpt-0000000009.ddpt"
timeout -k 5 30 ddp-train "${synth[@]}" --model resnet20 --max-steps 2 --ckpt-dir "$SCRATCH/onlyfifo" \
    > "$SCRATCH/out" 2>&1 || { echo "a run beside only a FIFO exited $?:"; cat "$SCRATCH/out"; exit 1; }
grep -q "is a FIFO, not a checkpoint file: skipped" "$SCRATCH/out" && ! grep -q "resuming" "$SCRATCH/out" ||
    { cat "$SCRATCH/out"; exit 1; }
[ -e "$SCRATCH/onlyfifo/ckpt-0000000002.ddpt" ] || { ls -la "$SCRATCH/onlyfifo"; exit 1; }
echo "all refused clearly"
