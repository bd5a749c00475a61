#!/usr/bin/env bash
# timeout: 180
# SIGTERM to ddprun reaches the ddp-train ranks, which finish the step they
# are in, write a checkpoint and exit 0 well within the shutdown timeout;
# a new run resumes from that step.
source "$(dirname "$0")/../lib/train.bash"
args=(--data synthetic --input-shape 3x16x16 --synthetic-size 100000 --threads 1 --no-eval
      --log-every 1 --batch-size 8 --ckpt-dir "$SCRATCH/ck")
ddprun --standalone --nproc-per-node=2 --shutdown-timeout=60 --no-python ddp-train "${args[@]}" \
    > "$SCRATCH/run.log" 2>&1 &
agent=$!
PIDS+=($agent)
for _ in $(seq 300); do grep -q "step 3/" "$SCRATCH/run.log" && break; sleep 0.1; done
t0=$(date +%s%N)
kill -TERM "$agent"
rc=0
wait "$agent" || rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $rc -eq 143 ] || { echo "ddprun exited $rc, not 143"; cat "$SCRATCH/run.log"; exit 1; }
[ $ms -lt 30000 ] || { echo "stopping took $ms ms"; exit 1; }
grep -q "stopping on SIGTERM" "$SCRATCH/run.log" || { cat "$SCRATCH/run.log"; exit 1; }
if grep -q "did not stop within" "$SCRATCH/run.log"; then echo "a worker needed SIGKILL"; cat "$SCRATCH/run.log"; exit 1; fi
ck=$(ls "$SCRATCH/ck" | tail -n 1)
[ -n "$ck" ] || { echo "no checkpoint written"; cat "$SCRATCH/run.log"; exit 1; }
step=$((10#$(echo "$ck" | sed 's/ckpt-\([0-9]*\).ddpt/\1/')))
echo "stopped in $ms ms with $ck"
ddp-train "${args[@]}" --max-steps $((step + 1)) > "$SCRATCH/resume.log" 2>&1 || { cat "$SCRATCH/resume.log"; exit 1; }
grep -q "resuming from .*$ck" "$SCRATCH/resume.log" || { cat "$SCRATCH/resume.log"; exit 1; }
