#!/usr/bin/env bash
# timeout: 150
# Two jobs on one --ckpt-dir: job A writes checkpoints there; job B, started
# on the same directory while A trains, stops at once (exit 1) with an error
# naming the directory and A (its pid, host and run id), before it trains or
# deletes anything, and A finishes with every checkpoint whole. Once A has
# ended, B takes the directory and resumes from A's last checkpoint. A lock
# left by a process killed with SIGKILL blocks nobody: the next run takes the
# directory and resumes.
source "$(dirname "$0")/../lib/train.bash"
D=$SCRATCH/shared
run=(--data synthetic --input-shape 3x16x16 --synthetic-size 8192 --batch-size 8 --threads 1
     --no-eval --log-every 1000 --ckpt-every 4 --keep 2 --ckpt-dir "$D")

# A: long enough to be running when B comes (about 16 ms a step here).
TORCHELASTIC_RUN_ID=job-a ddp-train "${run[@]}" --max-steps 400 > "$SCRATCH/a.log" 2>&1 &
a=$!
PIDS+=($a)
for _ in $(seq 300); do grep -q "checkpoint $D/ckpt-0000000008.ddpt" "$SCRATCH/a.log" && break; sleep 0.05; done
grep -q "checkpoint $D/ckpt-0000000008.ddpt" "$SCRATCH/a.log" ||
    { echo "A wrote no checkpoint in 15 s"; cat "$SCRATCH/a.log"; exit 1; }
kill -0 "$a" 2>/dev/null || { echo "A ended before B could start"; cat "$SCRATCH/a.log"; exit 1; }

# B on the same directory: refused at start, quickly, naming A.
t0=$(date +%s%N)
rc=0
TORCHELASTIC_RUN_ID=job-b timeout -k 5 60 ddp-train "${run[@]}" --max-steps 400 > "$SCRATCH/b.log" 2>&1 ||
    rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$rc" = 1 ] || { echo "B exited $rc while A trains, not 1:"; cat "$SCRATCH/b.log"; exit 1; }
grep -Eq -- "error: rank 0: --ckpt-dir $D is in use by another job \(pid $a on host $(hostname), run id job-a, since [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z\): give each job its own --ckpt-dir" \
    "$SCRATCH/b.log" || { echo "B's error does not name the directory and A (pid $a):"; cat "$SCRATCH/b.log"; exit 1; }
if grep -Eq 'resuming from|checkpoint .*ddpt \(epoch|done:' "$SCRATCH/b.log"; then
    echo "B resumed, trained or wrote before it was refused:"; cat "$SCRATCH/b.log"; exit 1
fi
[ "$ms" -lt 10000 ] || { echo "B took $ms ms to be refused"; exit 1; }
echo "ok: B refused in $ms ms: $(grep -o 'error: .*' "$SCRATCH/b.log")"
kill -0 "$a" 2>/dev/null || { echo "A ended while B was refused: the test proves nothing"; exit 1; }

# A finishes, every checkpoint it left whole, no temporary file behind.
wait "$a" || { echo "A failed:"; tail -n 20 "$SCRATCH/a.log"; exit 1; }
if grep -q 'error' "$SCRATCH/a.log"; then echo "A logged an error:"; cat "$SCRATCH/a.log"; exit 1; fi
ls "$D"
[ "$(ls "$D")" = "$(printf 'ckpt-0000000396.ddpt\nckpt-0000000400.ddpt')" ] ||
    { echo "A's checkpoints are not the two it keeps"; ls -la "$D"; exit 1; }
for f in "$D"/ckpt-*.ddpt; do
    ddp-train inspect "$f" > "$SCRATCH/inspect.json" || { echo "$f does not verify"; exit 1; }
done
grep -q '"global_step": 400' "$SCRATCH/inspect.json" || { cat "$SCRATCH/inspect.json"; exit 1; }
[ -z "$(find "$D" -name '.ckpt-*')" ] || { echo "temporary files left:"; ls -la "$D"; exit 1; }

# After A: B takes the directory and resumes from A's last checkpoint.
TORCHELASTIC_RUN_ID=job-b timeout -k 5 60 ddp-train "${run[@]}" --max-steps 404 > "$SCRATCH/b2.log" 2>&1 ||
    { echo "B failed after A had ended:"; cat "$SCRATCH/b2.log"; exit 1; }
grep -q "resuming from $D/ckpt-0000000400.ddpt" "$SCRATCH/b2.log" || { cat "$SCRATCH/b2.log"; exit 1; }

# A holder killed with SIGKILL leaves its lock file, not its lock.
ddp-train "${run[@]}" --max-steps 100000 > "$SCRATCH/c.log" 2>&1 &
c=$!
PIDS+=($c)
# (its log line: the file itself may already be gone, --keep 2 at a few
# milliseconds a step)
for _ in $(seq 300); do grep -q "checkpoint $D/ckpt-0000000412.ddpt" "$SCRATCH/c.log" && break; sleep 0.05; done
grep -q "checkpoint $D/ckpt-0000000412.ddpt" "$SCRATCH/c.log" ||
    { echo "C wrote no checkpoint in 15 s"; cat "$SCRATCH/c.log"; exit 1; }
kill -9 "$c"
wait "$c" 2>/dev/null || true
timeout -k 5 60 ddp-train "${run[@]}" --max-steps 420 > "$SCRATCH/d.log" 2>&1 ||
    { echo "the run after a killed holder failed:"; cat "$SCRATCH/d.log"; exit 1; }
grep -q "resuming from $D/ckpt-" "$SCRATCH/d.log" || { cat "$SCRATCH/d.log"; exit 1; }

# A process of the same run (the group's previous rank 0, still writing its
# SIGTERM checkpoint, maybe on another host of a shared file system) is
# waited for: the new one takes the directory once the old one has stopped,
# and resumes from the checkpoint it wrote on its way out.
wait_for() { # pattern, file, what
    for _ in $(seq 300); do grep -q "$1" "$2" && return 0; sleep 0.05; done
    echo "no $3 in 15 s:"; cat "$2"; exit 1
}
TORCHELASTIC_RUN_ID=job-r ddp-train "${run[@]}" --max-steps 100000 > "$SCRATCH/old.log" 2>&1 &
old=$!
PIDS+=($old)
wait_for "checkpoint $D/ckpt-0000000428.ddpt" "$SCRATCH/old.log" "checkpoint at step 428"
TORCHELASTIC_RUN_ID=job-r ddp-train "${run[@]}" --max-steps 100000 > "$SCRATCH/new.log" 2>&1 &
new=$!
PIDS+=($new)
wait_for "is held by pid $old on host .*, of this same run" "$SCRATCH/new.log" "waiting"
kill -TERM "$old"
wait "$old" || { echo "the old rank 0 exited $? on SIGTERM"; cat "$SCRATCH/old.log"; exit 1; }
at=$(sed -n 's/.*stopping on SIGTERM after step \([0-9]*\).*/\1/p' "$SCRATCH/old.log")
[ -n "$at" ] || { cat "$SCRATCH/old.log"; exit 1; }
wait_for "resuming from $D/ckpt-$(printf %010d "$at").ddpt" "$SCRATCH/new.log" "resume from step $at"
kill -TERM "$new"
wait "$new" || { echo "the new rank 0 exited $?:"; cat "$SCRATCH/new.log"; exit 1; }
echo "ok: the same run's next rank 0 waited for the old one and resumed from its step $at"
echo "one job per --ckpt-dir: the second refused naming the first; a dead holder blocks nobody"
