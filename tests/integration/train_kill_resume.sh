#!/usr/bin/env bash
# timeout: 300
# isa: AVX2 SSE41
# Two agents x two workers train with --max-restarts=3 and checkpoints every
# 3 steps; one worker is killed with SIGKILL mid-epoch. The group restarts
# from the last checkpoint and the job finishes with weights bit-identical
# to an uninterrupted run's.
source "$(dirname "$0")/../lib/train.bash"
have_numpy || { echo "skipped: numpy (python3-numpy) is not installed"; exit 77; }
steps=12
train=(--model resnet20 --data synthetic --input-shape 3x16x16 --synthetic-size 4096 --threads 1
       --no-eval --log-every 1000 --batch-size 16 --max-steps $steps --ckpt-every 3 --seed 5)
job() { # name, port: two agents on loopback, two workers each
    local name=$1 p=$2 i
    for i in 0 1; do
        ddprun --nnodes=2 --nproc-per-node=2 --max-restarts=3 --rdzv-backend=c10d \
            --rdzv-endpoint=127.0.0.1:$p --rdzv-id="$name" --no-python \
            ddp-train "${train[@]}" --ckpt-dir "$SCRATCH/$name" > "$SCRATCH/$name.$i.log" 2>&1 &
        PIDS+=($!)
    done
}
wait_all() { local rc=0 p; for p in "$@"; do wait "$p" || rc=1; done; return $rc; }

job clean "$(free_port)"
wait_all "${PIDS[@]}" || { tail -n 20 "$SCRATCH"/clean.*.log; exit 1; }
PIDS=()

job killed "$(free_port)"
agent=${PIDS[1]}
# Wait for the checkpoint at step 6, then kill one of the second agent's workers.
for _ in $(seq 600); do
    [ -e "$SCRATCH/killed/ckpt-0000000006.ddpt" ] && break
    sleep 0.1
done
[ -e "$SCRATCH/killed/ckpt-0000000006.ddpt" ] || { echo "no checkpoint at step 6"; tail -n 20 "$SCRATCH"/killed.*.log; exit 1; }
victim=$(pgrep -P "$agent" | head -n 1)
[ -n "$victim" ] || { echo "no worker found under agent $agent"; exit 1; }
echo "killing worker $victim"
kill -9 "$victim"
wait_all "${PIDS[@]}" || { tail -n 30 "$SCRATCH"/killed.*.log; exit 1; }
grep -q "restart 1 of 3" "$SCRATCH"/killed.0.log || { echo "the group did not restart"; cat "$SCRATCH"/killed.0.log; exit 1; }
grep -h -E "failed|restart|resuming" "$SCRATCH"/killed.*.log | head -8
compare "$SCRATCH/killed" "$SCRATCH/clean" --exact
