#!/usr/bin/env bash
# timeout: 240
# Another job's checkpoints in a node's --ckpt-dir are never this job's
# starting point, and never touched. Two agents x one worker, each node its
# own directory:
#  1. node 1's directory holds another job's files (--seed 1, a newer step
#     than anything of ours): node 1 says so, naming the difference, and
#     neither resumes from it nor writes into it; the job trains from the
#     start on node 0's directory and ends with the weights of a job given
#     two empty directories; the other job's files are as they were;
#  2. node 1's directory holds our own configuration's files at a newer
#     step, but another process (another job: not this run id) holds it:
#     not read, not written, said;
#  3. one node whose directory holds another job's files, and no other:
#     the job does not start, with an error saying why (nowhere to keep
#     its checkpoints), and the files stay as they were.
source "$(dirname "$0")/../lib/train.bash"
have_numpy || { echo "skipped: numpy (python3-numpy) is not installed"; exit 77; }
command -v flock > /dev/null || { echo "skipped: flock (util-linux) is not installed"; exit 77; }
TRAIN=(--model resnet20 --data synthetic --input-shape 3x8x8 --synthetic-size 4096 --threads 1
       --no-eval --log-every 100 --batch-size 16 --snapshot-every 0 --ckpt-every 4)
sums() { (cd "$1" && sha256sum ckpt-*.ddpt); }

# The other job: --seed 1, 12 steps, in what will be node 1's directory.
ddp-train "${TRAIN[@]}" --seed 1 --max-steps 12 --ckpt-dir "$SCRATCH/other" > "$SCRATCH/other.log" 2>&1 ||
    { cat "$SCRATCH/other.log"; exit 1; }
before=$(sums "$SCRATCH/other")
two_nodes fresh 1 "$SCRATCH/f.0" "$SCRATCH/f.1" --seed 9 --max-steps 8

# 1. Leftovers of another job.
two_nodes a 1 "$SCRATCH/a.0" "$SCRATCH/other" --seed 9 --max-steps 8
if grep -h "resuming from" "$SCRATCH"/a.*.log; then echo "FAIL: resumed from another job's checkpoint"; exit 1; fi
grep -q "rank 1: --ckpt-dir $SCRATCH/other holds another job's checkpoints (ckpt-0000000012.ddpt: --seed 1, not 9): this node neither resumes from it nor writes there" "$SCRATCH/a.1.log" ||
    { echo "FAIL: node 1 did not say its directory is another job's"; cat "$SCRATCH/a.1.log"; exit 1; }
[ "$before" = "$(sums "$SCRATCH/other")" ] || { echo "FAIL: the other job's directory changed"; ls -l "$SCRATCH/other"; exit 1; }
compare "$SCRATCH/a.0" "$SCRATCH/f.0" --exact || { echo "FAIL: not the weights of a job started fresh"; exit 1; }

# 2. Our configuration's files, newer, but in a directory another job holds.
two_nodes b 1 "$SCRATCH/b.0" "$SCRATCH/b.1" --seed 9 --max-steps 12
mkdir -p "$SCRATCH/live" && cp "$SCRATCH/b.1/ckpt-0000000012.ddpt" "$SCRATCH/live/"
# the holder: a process of no run of ours with the directory's lock
"$TEST_PY" -c 'import fcntl, sys, time
f = open(sys.argv[1], "a"); fcntl.flock(f, fcntl.LOCK_EX); print("held", flush=True); time.sleep(120)' \
    "$SCRATCH/live/.lock" > "$SCRATCH/holder.out" &
holder=$!
trap 'kill -9 "$holder" 2> /dev/null || true; cleanup' EXIT
for _ in $(seq 50); do grep -q held "$SCRATCH/holder.out" && break; sleep 0.1; done
two_nodes c 1 "$SCRATCH/c.0" "$SCRATCH/live" --seed 9 --max-steps 8
kill "$holder"; wait "$holder" 2> /dev/null || true
if grep -h "resuming from" "$SCRATCH"/c.*.log; then echo "FAIL: resumed from a directory another job holds"; exit 1; fi
grep -q "rank 1: --ckpt-dir $SCRATCH/live is in use by another job (.*): this node neither resumes from it nor writes there" "$SCRATCH/c.1.log" ||
    { echo "FAIL: node 1 did not say its directory is in another job's use"; cat "$SCRATCH/c.1.log"; exit 1; }
[ "$(cd "$SCRATCH/live" && ls ckpt-*.ddpt | tr '\n' ' ')" = "ckpt-0000000012.ddpt " ] || { echo "FAIL: the held directory was written"; ls "$SCRATCH/live"; exit 1; }
compare "$SCRATCH/c.0" "$SCRATCH/f.0" --exact || { echo "FAIL: not the weights of a job started fresh"; exit 1; }

# 3. Nowhere to keep checkpoints: an error at the start, the files untouched.
rc=0
ddp-train "${TRAIN[@]}" --seed 9 --max-steps 8 --ckpt-dir "$SCRATCH/other" > "$SCRATCH/none.log" 2>&1 || rc=$?
[ $rc = 1 ] && grep -q "no node can keep this job's checkpoints" "$SCRATCH/none.log" ||
    { echo "FAIL: exit $rc without the error saying no node can keep checkpoints:"; cat "$SCRATCH/none.log"; exit 1; }
[ "$before" = "$(sums "$SCRATCH/other")" ] || { echo "FAIL: the other job's directory changed"; exit 1; }
echo "ok: another job's files and a directory another job holds were neither read nor written; with nowhere else to write, a clear error"
