#!/usr/bin/env bash
# timeout: 60
# Rank 0's progress: a line every --log-every steps with epoch, step/total,
# loss, accuracy, img/s and ETA, and the final img/s= line; on a terminal a
# bar is redrawn in place between those lines (and cleared before them); on
# a pipe or file there is no bar and no escape sequence.
source "$(dirname "$0")/../lib/train.bash"
command -v script >/dev/null || { echo "skipped: no script(1) to give ddp-train a terminal"; exit 77; }
args=(--data synthetic --input-shape 1x16x16 --synthetic-size 2000 --batch-size 32 --threads 1
      --max-steps 12 --log-every 5 --no-eval)

ddp-train "${args[@]}" > "$SCRATCH/pipe.log" 2>&1 || { cat "$SCRATCH/pipe.log"; exit 1; }
grep -Eq '^epoch 1/1 step 5/63 loss [0-9.]+ acc [0-9.]+% lr [0-9.e-]+ [0-9]+ img/s ETA [0-9]+m[0-9]{2}s$' \
    "$SCRATCH/pipe.log" || { echo "no progress line at step 5:"; cat "$SCRATCH/pipe.log"; exit 1; }
grep -q '^epoch 1/1 step 10/63 ' "$SCRATCH/pipe.log" || { cat "$SCRATCH/pipe.log"; exit 1; }
grep -Eq '^done: 12 steps, img/s=[0-9.]+$' "$SCRATCH/pipe.log" || { cat "$SCRATCH/pipe.log"; exit 1; }
if grep -q $'\r\|\033\|\[#' "$SCRATCH/pipe.log"; then echo "a bar went to a pipe:"; cat -A "$SCRATCH/pipe.log"; exit 1; fi

# On a terminal (script(1) gives the program a pseudo-terminal).
script -qec "$BIN/ddp-train ${args[*]}" /dev/null > "$SCRATCH/tty.log" 2>&1 ||
    { cat -A "$SCRATCH/tty.log"; exit 1; }
tr '\r' '\n' < "$SCRATCH/tty.log" | sed 's/\x1b\[K//g' > "$SCRATCH/tty.lines"
grep -Eq '^epoch 1/1 \[#{1,30}\.+\] 7/63 loss [0-9.]+ [0-9]+ img/s ETA ' "$SCRATCH/tty.lines" ||
    { echo "no bar at step 7:"; cat -A "$SCRATCH/tty.log"; exit 1; }
grep -q '^epoch 1/1 step 10/63 ' "$SCRATCH/tty.lines" || { cat -A "$SCRATCH/tty.log"; exit 1; }
# The bar is cleared (CR, erase line) right before each progress line.
grep -q $'\r\033\\[Kepoch 1/1 step 10/63' "$SCRATCH/tty.log" ||
    { echo "the bar was not cleared before the line:"; cat -A "$SCRATCH/tty.log"; exit 1; }
echo "progress lines on a pipe; bar on a terminal"
