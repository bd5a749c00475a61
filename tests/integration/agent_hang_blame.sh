#!/usr/bin/env bash
# A hang traced to the rank that caused it. Three ddp-train ranks under
# ddprun's worker watchdog (--step-timeout 2); rank 1 is frozen (SIGSTOP),
# first wherever it happens to be, then caught inside a collective (its
# collective record, read with coll-peek, shows one entered and not
# finished while it is stopped). Every rank's deadline passes; the
# watchdog kills them all. The collective records say which rank the
# others waited for: the log's "hang in collective #N" line and the
# summary's root cause name rank 1 and that its process was stopped,
# whichever rank's deadline passed first; the waiting ranks' stacks,
# written before the kill, show them inside the collective.
# timeout: 120
source "$(dirname "$0")/../lib/train.bash"
PEEK=$ROOT/build/tests/coll-peek
[ -x "$PEEK" ] || { echo "skipped: build/tests/coll-peek is not built"; exit 77; }
export TORCHELASTIC_ENABLE_FILE_TIMER=1
unset TORCHELASTIC_TIMER_FILE
args=(--data synthetic --input-shape 3x16x16 --synthetic-size 100000 --threads 1 --no-eval
      --log-every 1 --batch-size 8 --max-steps 100000 --step-timeout 2 --timeout 120)

start() { # LOG
    ddprun --standalone --nproc-per-node 3 --max-restarts 0 --no-python ddp-train "${args[@]}" \
        > "$1" 2>&1 &
    agent=$!
    PIDS+=($agent)
    for _ in $(seq 300); do grep -q "step 5/" "$1" && break; sleep 0.1; done
    victim=$(worker_of_rank 1 "$agent")
    [ -n "$victim" ] || { cat "$1"; echo "no rank 1 found"; exit 1; }
    record=$(env_of "$victim" DDPRUN_COLL_RECORD)
    [ -n "$record" ] || { cat "$1"; echo "the worker has no DDPRUN_COLL_RECORD"; exit 1; }
}

check() { # LOG: rank 1 blamed, in the log and as the summary's root cause
    local log=$1 rc=0
    wait "$agent" || rc=$?
    [ $rc -eq 1 ] || { cat "$log"; echo "ddprun exited $rc, not 1"; exit 1; }
    grep -q "hang in collective #[0-9]*: .*rank 1 (host [^,]*, pid $victim)" "$log" ||
        { cat "$log"; echo "no verdict naming rank 1"; exit 1; }
    grep "hang in collective" "$log" | grep -q "its process is stopped (SIGSTOP)" ||
        { cat "$log"; echo "the verdict does not say rank 1 was stopped"; exit 1; }
    sed -n '/^Root Cause/,/^=====/p' "$log" | grep -q "rank      : 1 (local_rank: 1)" ||
        { cat "$log"; echo "the root cause is not rank 1"; exit 1; }
    sed -n '/^Root Cause/,/^=====/p' "$log" | grep -q "the rank the others waited for: " ||
        { cat "$log"; echo "the root cause does not say why"; exit 1; }
    # the waiting ranks' stacks: inside DDP's wait for the collective
    grep -q "ddp-train: rank [02]: the stacks of every thread, .*collective #[0-9]* entered, not finished" "$log" &&
        grep -q "(comm_[a-z_]*+0x" "$log" ||
        { cat "$log"; echo "no stacks of the waiting ranks inside a collective"; exit 1; }
}

# (1) frozen wherever it is (a step takes a few ms: mostly computing)
start "$SCRATCH/anywhere.log"
kill -STOP "$victim"
check "$SCRATCH/anywhere.log"
echo "frozen anywhere: $(sed -n 's/.*\] ddprun: error: \(hang in collective #[0-9]*\): .*/\1/p' "$SCRATCH/anywhere.log") names rank 1"

# (2) frozen inside a collective: stopped, and its record shows the
# collective entered and not finished
start "$SCRATCH/inside.log"
caught=
for _ in $(seq 2000); do
    read -r entered done _ < <("$PEEK" "$record") || continue
    [ "$entered" -gt "$done" ] || continue
    kill -STOP "$victim"
    read -r e2 d2 _ < <("$PEEK" "$record")
    if [ "$e2" -gt "$d2" ]; then caught=$e2; break; fi
    kill -CONT "$victim"
done
[ -n "$caught" ] || { kill -STOP "$victim"; cat "$SCRATCH/inside.log"; echo "never caught rank 1 inside a collective"; exit 1; }
check "$SCRATCH/inside.log"
echo "frozen inside collective #$caught: $(sed -n "s/.*\] ddprun: error: \(hang in collective .*\)/\1/p" "$SCRATCH/inside.log")"

# (3) across nodes: two agents (c10d on loopback), a rank each; rank 1
# frozen. Each agent reads its own rank's record and the other node's
# published positions: the verdict names rank 1, and so does the
# summary's root cause on both nodes.
port=$(free_port)
agents=()
for n in 0 1; do
    ddprun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
        --rdzv-id hang --max-restarts 0 --no-python ddp-train "${args[@]}" \
        > "$SCRATCH/node$n.log" 2>&1 &
    agents+=($!)
    PIDS+=($!)
done
for _ in $(seq 300); do
    grep -q "step 5/" "$SCRATCH"/node*.log && break
    sleep 0.1
done
victim=$(worker_of_rank 1 "${agents[@]}")
[ -n "$victim" ] || { cat "$SCRATCH"/node*.log; echo "no rank 1 found"; exit 1; }
kill -STOP "$victim"
for n in 0 1; do
    rc=0
    wait "${agents[$n]}" || rc=$?
    [ $rc -eq 1 ] || { cat "$SCRATCH/node$n.log"; echo "agent $n exited $rc, not 1"; exit 1; }
done
# (the agent whose worker's failure ended the round gives the verdict; the
# other learns of the failure from it)
grep -h "hang in collective #[0-9]*: " "$SCRATCH"/node*.log |
    grep -q "rank 1 (host [^,]*, pid $victim).*stopped (SIGSTOP)" ||
    { cat "$SCRATCH"/node*.log; echo "no verdict naming rank 1"; exit 1; }
for n in 0 1; do
    sed -n '/^Root Cause/,/^=====/p' "$SCRATCH/node$n.log" | grep -q "rank      : 1 (local_rank: 0)" ||
        { cat "$SCRATCH"/node*.log; echo "agent $n: the root cause is not rank 1"; exit 1; }
done
echo "across two nodes: both summaries name rank 1 ($(grep -h -o "hang in collective #[0-9]*" "$SCRATCH"/node*.log | head -n 1))"
