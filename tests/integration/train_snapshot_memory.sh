#!/usr/bin/env bash
# timeout: 300
# isa: AVX2
# Snapshots in the agents' memory (DDPRUN_SNAPSHOT_DIR), one after every
# step (--snapshot-every 1: these steps are so short that the automatic
# interval, at most 1% of a step's time, would space them out): two agents
# x two workers train without any --ckpt-every; global rank 0's worker is
# SIGKILLed mid-run. The group restarts from the newest snapshot, held in
# node 0's memory (its agent outlives the worker): at most one step is
# redone, it says so ("resuming from ...: step K (memory of node H)"), and
# the final weights are bit-identical to an uninterrupted run's. A run
# with --snapshot-every 0 restarts from step 0 instead and says nothing of
# memory. Nothing is left in /dev/shm.
source "$(dirname "$0")/../lib/train.bash"
have_numpy || { echo "skipped: numpy (python3-numpy) is not installed"; exit 77; }
steps=24
train=(--model resnet20 --data synthetic --input-shape 3x16x16 --synthetic-size 4096 --threads 1
       --no-eval --log-every 1 --batch-size 16 --max-steps $steps --seed 5 --snapshot-every 1)
export DDPRUN_SHM_DIR=$SCRATCH/shm
mkdir -p "$DDPRUN_SHM_DIR"
job() { # name, port, extra ddp-train args...: two agents on loopback, two workers each
    local name=$1 p=$2 i
    shift 2
    for i in 0 1; do
        ddprun --nnodes=2 --nproc-per-node=2 --max-restarts=3 --rdzv-backend=c10d \
            --rdzv-endpoint="127.0.0.1:$p" --rdzv-id="$name" --node-rank="$i" --no-python \
            ddp-train "${train[@]}" --ckpt-dir "$SCRATCH/$name.$i" "$@" \
            > "$SCRATCH/$name.$i.log" 2>&1 &
        PIDS+=($!)
    done
}
wait_all() { local rc=0 p; for p in "$@"; do wait "$p" || rc=1; done; return $rc; }
# The newest step rank 0 has printed.
last_step() { sed -n 's/^epoch [0-9]*\/[0-9]* step \([0-9]*\)\/.*/\1/p' "$1" | tail -n 1; }
# kill_rank0 NAME AT: SIGKILLs global rank 0's worker once it printed step AT; sets KILLED_AT.
kill_rank0() {
    local log=$SCRATCH/$1.0.log victim="" _
    for _ in $(seq 600); do [ "$(last_step "$log")" -ge "$2" ] 2> /dev/null && break; sleep 0.05; done
    for p in $(pgrep -P "${PIDS[0]}"); do
        tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "RANK=0" && victim=$p
    done
    [ -n "$victim" ] || { echo "no rank 0 worker found"; tail -n 20 "$log"; exit 1; }
    KILLED_AT=$(last_step "$log")
    kill -9 "$victim"
    echo "killed rank 0 (pid $victim) after step $KILLED_AT"
}

job clean "$(free_port)"
wait_all "${PIDS[@]}" || { tail -n 20 "$SCRATCH"/clean.*.log; exit 1; }
PIDS=()

job killed "$(free_port)"
kill_rank0 killed 8
wait_all "${PIDS[@]}" || { tail -n 30 "$SCRATCH"/killed.*.log; exit 1; }
grep -q "restart 1 of 3" "$SCRATCH/killed.0.log" || { echo "the group did not restart"; cat "$SCRATCH/killed.0.log"; exit 1; }
line=$(grep -h "resuming from" "$SCRATCH"/killed.*.log | head -n 1)
echo "$line"
from=$(sed -n 's/.*resuming from .*: epoch [0-9]*, step \([0-9]*\) (memory of node .*)$/\1/p' <<< "$line")
[ -n "$from" ] || { echo "FAIL: the restart did not resume from memory"; cat "$SCRATCH/killed.0.log"; exit 1; }
[ "$from" -ge $((KILLED_AT - 1)) ] ||
    { echo "FAIL: resumed from step $from, but step $KILLED_AT was done: more than one step lost"; exit 1; }
killed_at=$KILLED_AT
compare "$SCRATCH/killed.0" "$SCRATCH/clean.0" --exact
grep -q "snapshots in memory (.*), .* ms of the step's time each, .*% of the training time" \
    "$SCRATCH/killed.0.log" || { echo "FAIL: no word of what the snapshots cost"; cat "$SCRATCH/killed.0.log"; exit 1; }
grep -h "snapshots in memory" "$SCRATCH/killed.0.log" | head -n 1
PIDS=()

# Without snapshots the same kill costs every step since the start. (A
# longer run: a kill after the last step, where the poll above saw the
# steps late, would resume from the final checkpoint, rightly.)
job nosnap "$(free_port)" --snapshot-every 0 --max-steps 400 # (the last one given counts)
kill_rank0 nosnap 8
wait_all "${PIDS[@]}" || { tail -n 30 "$SCRATCH"/nosnap.*.log; exit 1; }
if grep -q "resuming from" "$SCRATCH"/nosnap.*.log; then
    echo "FAIL: --snapshot-every 0 resumed from something"; grep -h "resuming" "$SCRATCH"/nosnap.*.log; exit 1
fi
left=$(find "$DDPRUN_SHM_DIR" -mindepth 1 | head -n 3)
[ -z "$left" ] || { echo "FAIL: left in the memory root: $left"; exit 1; }
echo "ok: rank 0 killed after step $killed_at, resumed from step $from from memory, bit-exact"
