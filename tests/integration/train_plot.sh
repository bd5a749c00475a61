#!/usr/bin/env bash
# timeout: 150
# `ddp-train plot`: a two-rank job under ddprun writes --metrics while
# `plot --refresh` draws it; one worker is killed with SIGKILL, so the group
# restarts from its checkpoint. The picture appears while the job runs, the
# watcher stops by itself at the job's "done" line, and the final picture is
# a whole PNG (signature, every chunk's CRC, IEND) of the size asked for.
# The metrics file has a "start" line per (re)start and test lines with
# their global step. Bad input (a missing, empty or garbled metrics file, no
# gnuplot, a failing gnuplot, a bad --size, an unwritable output) gets its
# error and leaves no file behind, not even a temporary one; so does a FIFO
# as the metrics file, at once (its open() would wait for a writer). SIGTERM
# stops a watcher with its last picture whole, and SIGTERM or SIGINT stops a
# plot waiting on a gnuplot that takes its time, even one that has closed its
# pipes and lingers, within a few seconds and with nothing written.
source "$(dirname "$0")/../lib/train.bash"
command -v gnuplot >/dev/null ||
    { echo "skipped: no gnuplot (Debian's gnuplot-nox) to draw with"; exit 77; }
PY=/usr/bin/python3
M=$SCRATCH/run.jsonl
train=(--data synthetic --input-shape 3x16x16 --synthetic-size 1600 --batch-size 16 --threads 1
       --epochs 6 --log-every 1000 --ckpt-every 20 --ckpt-dir "$SCRATCH/ckpt" --metrics "$M")

# A whole PNG of WIDTH x HEIGHT: signature, IHDR first, every chunk's CRC, IEND last.
check_png() { # path width height
    "$PY" - "$@" <<'EOF'
import struct, sys, zlib
path, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = open(path, "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: no PNG signature"
at, kinds = 8, []
while at < len(d):
    n, kind = struct.unpack(">I4s", d[at:at + 8])
    body = d[at + 8:at + 8 + n]
    crc, = struct.unpack(">I", d[at + 8 + n:at + 12 + n])
    assert len(body) == n and zlib.crc32(kind + body) == crc, f"{path}: bad {kind} chunk"
    kinds.append(kind)
    if kind == b"IHDR":
        size = struct.unpack(">II", body[:8])
        assert size == (w, h), f"{path}: {size[0]}x{size[1]}, not {w}x{h}"
    at += 12 + n
assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND", f"{path}: chunks {kinds}"
assert len(d) > 20000, f"{path}: {len(d)} bytes: too small for two panels of curves"
print(f"{path}: {w}x{h} PNG, {len(d)} bytes, {len(kinds)} chunks")
EOF
}
no_temp_files() { # nothing half-written anywhere in the scratch directory
    local left
    left=$(find "$SCRATCH" -maxdepth 1 -name '.*.png.*')
    [ -z "$left" ] || { echo "temporary files left behind: $left"; exit 1; }
}

# The watcher starts before the job, so it first waits for the file.
ddp-train plot "$M" -o "$SCRATCH/live.png" --size 800x600 --refresh 0.2 \
    > "$SCRATCH/live.out" 2> "$SCRATCH/live.err" &
live=$!
PIDS+=($live)
ddprun --standalone --nproc-per-node=2 --max-restarts=1 --no-python ddp-train "${train[@]}" \
    > "$SCRATCH/job.log" 2>&1 &
job=$!
PIDS+=($job)

# The picture while the job runs: before the metrics' "done" line.
for _ in $(seq 300); do [ -e "$SCRATCH/live.png" ] && break; sleep 0.05; done
[ -e "$SCRATCH/live.png" ] || { echo "--refresh drew nothing in 15 s"; cat "$SCRATCH/live.err"; exit 1; }
if grep -q '"event":"done"' "$M"; then echo "the job ended before the first picture"; exit 1; fi
kill -0 "$live" || { echo "the watcher stopped while the job runs"; cat "$SCRATCH/live.err"; exit 1; }
check_png "$SCRATCH/live.png" 800 600

# Kill a worker after the checkpoint at step 60: the group restarts from it.
for _ in $(seq 600); do [ -e "$SCRATCH/ckpt/ckpt-0000000060.ddpt" ] && break; sleep 0.02; done
victim=$(pgrep -P "$job" | head -n 1)
[ -n "$victim" ] || { echo "no worker under ddprun $job"; exit 1; }
kill -9 "$victim"
wait "$job" || { echo "the job failed"; tail -n 20 "$SCRATCH/job.log"; exit 1; }
grep -q '"event":"start","global_step":[1-9][0-9]*,.*"restart":1,"world_size":2' "$M" ||
    { echo "no start line for the restart:"; grep event "$M"; exit 1; }
[ "$(grep -c '"test_loss"' "$M")" = 6 ] || { grep test_loss "$M"; exit 1; }
[ "$(grep -c '"global_step":[0-9]*,"test_loss"' "$M")" = 6 ] ||
    { echo "test lines without their global step:"; grep test_loss "$M"; exit 1; }
tail -n 1 "$M" | grep -q '"event":"done","global_step":300,' || { tail -n 2 "$M"; exit 1; }

# The watcher ends by itself at "done", 0, with the whole job drawn.
for _ in $(seq 100); do kill -0 "$live" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$live" 2>/dev/null; then echo "--refresh still running 10 s after the job's end"; exit 1; fi
wait "$live" || { echo "--refresh exited $?"; cat "$SCRATCH/live.err"; exit 1; }
grep -Eq 'live.png: 3[0-9]{2} steps, 6 evaluations, 1 restart; the job is done' "$SCRATCH/live.out" ||
    { cat "$SCRATCH/live.out" "$SCRATCH/live.err"; exit 1; }
grep -q 'waiting: cannot read metrics file .*run.jsonl: No such file' "$SCRATCH/live.err" ||
    { echo "the watcher did not say it waited for the file:"; cat "$SCRATCH/live.err"; exit 1; }
check_png "$SCRATCH/live.png" 800 600

# Drawn after the job: the size asked for, and by default beside the metrics.
ddp-train plot "$M" --size 1000x700 --title "ResNet-20, 2 ranks, one killed" -o "$SCRATCH/final.png"
check_png "$SCRATCH/final.png" 1000 700
ddp-train plot "$M" > /dev/null
check_png "$SCRATCH/run.png" 1200 800

# SIGTERM stops a watcher of a job that never ends; its picture stays whole.
grep -v '"event":"done"' "$M" > "$SCRATCH/unfinished.jsonl"
ddp-train plot "$SCRATCH/unfinished.jsonl" -o "$SCRATCH/term.png" --refresh 0.2 \
    > /dev/null 2> "$SCRATCH/term.err" &
term=$!
PIDS+=($term)
for _ in $(seq 200); do [ -e "$SCRATCH/term.png" ] && break; sleep 0.05; done
sleep 0.5
kill -0 "$term" || { echo "the watcher of an unfinished job stopped"; cat "$SCRATCH/term.err"; exit 1; }
kill -TERM "$term"
for _ in $(seq 50); do kill -0 "$term" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$term" 2>/dev/null; then echo "--refresh still running 5 s after SIGTERM"; exit 1; fi
wait "$term" || { echo "the watcher exited $? on SIGTERM"; cat "$SCRATCH/term.err"; exit 1; }
grep -q 'stopping on SIGTERM' "$SCRATCH/term.err" || { cat "$SCRATCH/term.err"; exit 1; }
check_png "$SCRATCH/term.png" 1200 800

# Bad input: exit status, the message, and no file.
bad() { # status, expected message (a grep -E pattern), output file, ddp-train plot arguments...
    # (PLOT_PATH: the PATH ddp-train plot runs with)
    local want=$1 pattern=$2 out=$3 rc=0
    shift 3
    timeout -k 5 10 env ${PLOT_PATH:+PATH="$PLOT_PATH"} "$BIN/ddp-train" plot "$@" \
        > "$SCRATCH/bad.out" 2> "$SCRATCH/bad.err" || rc=$?
    [ "$rc" = "$want" ] || { echo "plot $*: exit $rc, not $want"; cat "$SCRATCH/bad.err"; exit 1; }
    grep -Eq -e "$pattern" "$SCRATCH/bad.err" ||
        { echo "plot $*: no '$pattern' in:"; cat "$SCRATCH/bad.err"; exit 1; }
    [ ! -e "$out" ] || { echo "plot $*: $out was written"; exit 1; }
    echo "ok: $(head -n 1 "$SCRATCH/bad.err")"
}
bad 1 "cannot read metrics file $SCRATCH/none.jsonl: No such file or directory" \
    "$SCRATCH/b1.png" "$SCRATCH/none.jsonl" -o "$SCRATCH/b1.png"
: > "$SCRATCH/empty.jsonl"
bad 1 "metrics file $SCRATCH/empty.jsonl is empty" "$SCRATCH/b2.png" "$SCRATCH/empty.jsonl" \
    -o "$SCRATCH/b2.png"
sed '5s/.*/{"epoch":1,"step":4,"glob/' "$M" > "$SCRATCH/garbled.jsonl"
bad 1 "garbled.jsonl:5: not JSON .*'\\{\"epoch\":1,\"step\":4,\"glob'" "$SCRATCH/b3.png" \
    "$SCRATCH/garbled.jsonl" -o "$SCRATCH/b3.png"
bad 2 "--size: '12x' is not WIDTHxHEIGHT in pixels, each from 100 to 8000" "$SCRATCH/b4.png" \
    "$M" --size 12x -o "$SCRATCH/b4.png"
bad 2 "--size: '9000x800' is not WIDTHxHEIGHT" "$SCRATCH/b4.png" "$M" --size 9000x800 \
    -o "$SCRATCH/b4.png"
bad 2 "--refresh: '0' is not a number of seconds from 0.1 to 86400" "$SCRATCH/b4.png" "$M" \
    --refresh 0 -o "$SCRATCH/b4.png"
bad 2 "which metrics file\\?" "$SCRATCH/b4.png" -o "$SCRATCH/b4.png"
bad 1 "cannot write $SCRATCH/nodir/b5.png: cannot create a file in $SCRATCH/nodir: No such file" \
    "$SCRATCH/nodir/b5.png" "$M" -o "$SCRATCH/nodir/b5.png"
cp "$M" "$SCRATCH/same.jsonl"
bad 2 "-o $SCRATCH/./same.jsonl is the metrics file itself" "$SCRATCH/b4.png" "$SCRATCH/same.jsonl" \
    -o "$SCRATCH/./same.jsonl"
cmp -s "$M" "$SCRATCH/same.jsonl" || { echo "the metrics file was overwritten"; exit 1; }
bad 1 "cannot write $SCRATCH/ckpt: it is a directory" "$SCRATCH/ckpt/.none" "$M" -o "$SCRATCH/ckpt"
# A device or a FIFO is never replaced by the PNG (as root, -o /dev/full once
# became a regular file): a character device made here, when mknod works.
mkfifo "$SCRATCH/fifo"
bad 1 "cannot write $SCRATCH/fifo: it is a FIFO, not a file" "$SCRATCH/fifo.none" "$M" -o "$SCRATCH/fifo"
[ -p "$SCRATCH/fifo" ] || { echo "the FIFO was replaced"; exit 1; }
if mknod "$SCRATCH/null" c 1 3 2> /dev/null; then
    bad 1 "cannot write $SCRATCH/null: it is a character device, not a file" "$SCRATCH/null.none" \
        "$M" -o "$SCRATCH/null"
    [ -c "$SCRATCH/null" ] || { echo "the character device was replaced"; exit 1; }
else
    echo "(mknod refused here: the character device case is left out)"
fi
PLOT_PATH=/nonexistent bad 1 "gnuplot is not installed \\(not found on PATH\\): install gnuplot" \
    "$SCRATCH/b6.png" "$M" -o "$SCRATCH/b6.png"
# A gnuplot that fails after writing the start of a PNG: the old picture stays.
mkdir "$SCRATCH/fakebin"
printf '#!/bin/sh\nprintf "\\211PNG\\r\\n\\032\\n"\ncat > /dev/null\necho "line 7: broken on purpose" >&2\nexit 3\n' \
    > "$SCRATCH/fakebin/gnuplot"
chmod +x "$SCRATCH/fakebin/gnuplot"
cp "$SCRATCH/final.png" "$SCRATCH/keep.png"
PLOT_PATH=$SCRATCH/fakebin:$PATH bad 1 "gnuplot failed \\(exit status 3\\): line 7: broken on purpose" \
    "$SCRATCH/b7.png" "$M" -o "$SCRATCH/b7.png"
PLOT_PATH=$SCRATCH/fakebin:$PATH bad 1 "gnuplot failed" "$SCRATCH/b7.png" "$M" -o "$SCRATCH/keep.png"
cmp "$SCRATCH/final.png" "$SCRATCH/keep.png" || { echo "a failed draw changed the old picture"; exit 1; }
# A FIFO as the metrics file: refused at once, drawing once or with --refresh.
mkfifo "$SCRATCH/metrics.fifo"
bad 1 "cannot read metrics file $SCRATCH/metrics.fifo: it is a FIFO, not a regular file" \
    "$SCRATCH/b8.png" "$SCRATCH/metrics.fifo" -o "$SCRATCH/b8.png"
bad 1 "cannot read metrics file $SCRATCH/metrics.fifo: it is a FIFO" \
    "$SCRATCH/b8.png" "$SCRATCH/metrics.fifo" -o "$SCRATCH/b8.png" --refresh 0.2

# A stop signal while plot waits on gnuplot: a gnuplot that sleeps with its
# pipes open, and one that closes them and lingers (its exit is waited for).
# SIGINT is set back to its default: a script's background job inherits it
# ignored.
mkdir "$SCRATCH/fakebin/slow" "$SCRATCH/fakebin/mute"
printf '#!/bin/sh\n: > "$PLOT_MARK"\nexec sleep 60\n' > "$SCRATCH/fakebin/slow/gnuplot"
printf '#!/bin/sh\n: > "$PLOT_MARK"\nexec 0<&- 2>&-\nexec sleep 60\n' > "$SCRATCH/fakebin/mute/gnuplot"
chmod +x "$SCRATCH/fakebin/slow/gnuplot" "$SCRATCH/fakebin/mute/gnuplot"
stopped() { # wanted exit status, gnuplot (slow or mute), signal, ddp-train plot arguments...
    local want=$1 kind=$2 sig=$3 rc=0 p
    shift 3
    rm -f "$SCRATCH/mark"
    PLOT_MARK=$SCRATCH/mark env --default-signal=INT PATH="$SCRATCH/fakebin/$kind:$PATH" \
        "$BIN/ddp-train" plot "$@" > "$SCRATCH/sig.out" 2> "$SCRATCH/sig.err" &
    p=$!
    PIDS+=($p)
    for _ in $(seq 200); do [ -e "$SCRATCH/mark" ] && break; sleep 0.05; done
    [ -e "$SCRATCH/mark" ] || { echo "plot $*: gnuplot did not start"; cat "$SCRATCH/sig.err"; exit 1; }
    sleep 0.3
    kill -"$sig" "$p"
    for _ in $(seq 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$p" 2>/dev/null; then
        echo "plot $* (gnuplot $kind) still running 3 s after SIG$sig"; exit 1
    fi
    wait "$p" || rc=$?
    [ "$rc" = "$want" ] || { echo "plot $* (gnuplot $kind): exit $rc after SIG$sig, not $want"; cat "$SCRATCH/sig.err"; exit 1; }
    echo "ok: gnuplot $kind, SIG$sig: exit $rc: $(tail -n 1 "$SCRATCH/sig.err")"
}
for sig in TERM INT; do
    for kind in slow mute; do
        stopped 1 "$kind" "$sig" "$M" -o "$SCRATCH/sig.png"
        grep -q "interrupted by SIG$sig: nothing written" "$SCRATCH/sig.err" ||
            { echo "no 'interrupted by SIG$sig' in:"; cat "$SCRATCH/sig.err"; exit 1; }
        [ ! -e "$SCRATCH/sig.png" ] || { echo "a picture was written"; exit 1; }
    done
done
# A watcher: the last picture stays, exit 0.
cp "$SCRATCH/final.png" "$SCRATCH/sig.png"
stopped 0 mute TERM "$SCRATCH/unfinished.jsonl" -o "$SCRATCH/sig.png" --refresh 0.2
grep -q 'stopping on SIGTERM' "$SCRATCH/sig.err" || { cat "$SCRATCH/sig.err"; exit 1; }
cmp -s "$SCRATCH/final.png" "$SCRATCH/sig.png" || { echo "the last picture changed"; exit 1; }
no_temp_files
echo "plotted while training, across a restart; bad input refused with nothing left behind"
