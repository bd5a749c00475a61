#!/usr/bin/env bash
# --replace-stragglers: two agents in a job of exactly two nodes (--nnodes
# 2:2, c10d, one ddp-train rank each) and a third standing by as a spare.
# The rank of the node that does not serve the c10d store is slowed as a
# CPU limit would (stopped 60 ms of every 100): once the straggler watch
# names it, its node leaves the job (its agent exits 0, saying why), the
# group re-forms at once with the spare, and training goes on from the
# step the job had reached (from the memory of the node that stayed). (The
# node that serves the store stays: the job would end with it.)
# timeout: 120
source "$(dirname "$0")/../lib/train.bash"
port=$(free_port)
start() { # NAME
    ddprun --nnodes 2:2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
        --rdzv-id rep --straggler-window 1 --replace-stragglers --no-python ddp-train \
        --data synthetic --input-shape 3x16x16 --synthetic-size 100000 --threads 1 --no-eval \
        --log-every 50 --batch-size 8 --max-steps 100000000 > "$SCRATCH/$1.log" 2>&1 &
    eval "agent_$1=\$!"
    PIDS+=($!)
}
start a
for _ in $(seq 100); do (: < /dev/tcp/127.0.0.1/"$port") 2> /dev/null && break; sleep 0.1; done
start b # (a serves the store)
for _ in $(seq 300); do grep -q "step 100/" "$SCRATCH"/a.log "$SCRATCH"/b.log && break; sleep 0.1; done
start spare
for _ in $(seq 100); do grep -q "standing by as a spare" "$SCRATCH/spare.log" && break; sleep 0.1; done
grep -q "standing by as a spare" "$SCRATCH/spare.log" || { cat "$SCRATCH"/*.log; echo "the third agent is no spare"; exit 1; }
victim=$(ps --ppid "$agent_b" -o pid= | tr -d ' ' | head -n 1)
[ -n "$victim" ] || { cat "$SCRATCH"/*.log; echo "no worker of b found"; exit 1; }
rank=$(env_of "$victim" RANK)
slow_agent=$agent_b
( while kill -STOP "$victim" 2> /dev/null; do sleep 0.06; kill -CONT "$victim" 2> /dev/null; sleep 0.04; done ) &
slower=$!
PIDS+=($slower)
rc=0
timeout 40 tail --pid="$slow_agent" -f /dev/null || rc=$?
[ $rc -eq 0 ] || { cat "$SCRATCH"/*.log; echo "the straggler's node did not leave in 40 s"; exit 1; }
wait "$slow_agent" || { cat "$SCRATCH"/*.log; echo "the leaving agent did not exit 0"; exit 1; }
grep -q -- "--replace-stragglers: local rank 0 (rank $rank) is a straggler .* and 1 spare node stands by: this node leaves the job" "$SCRATCH/b.log" ||
    { cat "$SCRATCH"/*.log; echo "the leaving agent does not say why"; exit 1; }
# the spare's worker starts; the group resumes (rank 0 says from where)
# and trains on
for _ in $(seq 300); do grep -q "started 1 worker .*(round 1)" "$SCRATCH/spare.log" && break; sleep 0.1; done
grep -q "started 1 worker .*(round 1)" "$SCRATCH/spare.log" || { cat "$SCRATCH"/*.log; echo "the spare did not join"; exit 1; }
# Rank 0 of the new round is on whichever node got node rank 0: a, or the
# spare (agents are ordered by their ids, and on one host those hold the
# pids: as strings, a 5-digit pid comes before a 4-digit one).
for _ in $(seq 100); do
    stayer=$(grep -l "started 1 worker on [^:]*: node rank 0 of 2, .*(round 1)" "$SCRATCH/a.log" "$SCRATCH/spare.log" | head -n 1)
    [ -n "$stayer" ] && break
    sleep 0.1
done
[ -n "$stayer" ] || { cat "$SCRATCH"/*.log; echo "no node rank 0 in round 1"; exit 1; }
# (the holder of the newest snapshot, a's rank, says it resumes from it)
for _ in $(seq 300); do grep -q "resuming from" "$SCRATCH/a.log" && break; sleep 0.1; done
from=$(sed -n 's/.*resuming from .*: epoch [0-9]*, step \([0-9]*\) .*/\1/p' "$SCRATCH/a.log" | head -n 1)
[ -n "$from" ] && [ "$from" -gt 100 ] || { cat "$SCRATCH"/*.log; echo "the group did not resume the job (from '$from')"; exit 1; }
target=$((from + 100))
for _ in $(seq 300); do
    last=$(sed -n 's/.* step \([0-9]*\)\/.*/\1/p' "$stayer" | tail -n 1)
    [ -n "$last" ] && [ "$last" -ge "$target" ] && break
    sleep 0.1
done
[ "$last" -ge "$target" ] || { cat "$SCRATCH"/*.log; echo "the re-formed group did not train on (step $last)"; exit 1; }
kill -TERM "$agent_a" "$agent_spare" 2> /dev/null || true
wait "$agent_a" "$agent_spare" 2> /dev/null || true
left=$(sed -n 's/^\[\([0-9:.]*\)\] ddprun: warning: --replace-stragglers: .*this node leaves the job.*/\1/p' "$SCRATCH/b.log")
joined=$(sed -n 's/^\[\([0-9:.]*\)\] ddprun: started 1 worker .*(round 1)/\1/p' "$SCRATCH/spare.log")
echo "rank $rank's node left for the spare at $left; the spare's worker started at $joined; the group resumed at step $from, then reached step $last"
