#!/usr/bin/env bash
# timeout: 180
# SIGTERM to ddprun reaches the ddp-train ranks, which finish the step they
# are in, write a checkpoint and exit 0 well within the shutdown timeout;
# a new run resumes from that step. The same for SIGUSR1 (a scheduler's
# warning before preemption, e.g. Slurm's --signal) once ddprun is told to
# handle it (--signals-to-handle). And for SIGINT, Ctrl-C at a terminal,
# which lost every step since the last checkpoint.
source "$(dirname "$0")/../lib/train.bash"
args=(--data synthetic --input-shape 3x16x16 --synthetic-size 100000 --threads 1 --no-eval
      --log-every 1 --batch-size 8)

# stop_and_resume SIG DIR [DDPRUN ARGS...]
stop_and_resume() {
    local sig=$1 dir=$SCRATCH/$2
    shift 2
    mkdir -p "$dir"
    ddprun --standalone --nproc-per-node=2 --shutdown-timeout=60 "$@" --no-python ddp-train \
        "${args[@]}" --ckpt-dir "$dir/ck" > "$dir/run.log" 2>&1 &
    local agent=$!
    PIDS+=($agent)
    for _ in $(seq 300); do grep -q "step 3/" "$dir/run.log" && break; sleep 0.1; done
    local t0 rc=0 ms want
    t0=$(date +%s%N)
    kill -"$sig" "$agent"
    wait "$agent" || rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    want=$((128 + $(kill -l "$sig")))
    [ $rc -eq "$want" ] || { echo "SIG$sig: ddprun exited $rc, not $want"; cat "$dir/run.log"; exit 1; }
    [ $ms -lt 30000 ] || { echo "SIG$sig: stopping took $ms ms"; exit 1; }
    grep -q "stopping on SIG$sig" "$dir/run.log" || { cat "$dir/run.log"; exit 1; }
    if grep -q "did not stop within" "$dir/run.log"; then echo "a worker needed SIGKILL"; cat "$dir/run.log"; exit 1; fi
    local ck step
    ck=$(ls "$dir/ck" | tail -n 1)
    [ -n "$ck" ] || { echo "SIG$sig: no checkpoint written"; cat "$dir/run.log"; exit 1; }
    step=$((10#$(echo "$ck" | sed 's/ckpt-\([0-9]*\).ddpt/\1/')))
    echo "SIG$sig: stopped in $ms ms with $ck"
    ddp-train "${args[@]}" --ckpt-dir "$dir/ck" --max-steps $((step + 1)) > "$dir/resume.log" 2>&1 ||
        { cat "$dir/resume.log"; exit 1; }
    grep -q "resuming from .*$ck" "$dir/resume.log" || { cat "$dir/resume.log"; exit 1; }
}

stop_and_resume TERM term
stop_and_resume INT int # Ctrl-C at a terminal
stop_and_resume USR1 usr1 --signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1
