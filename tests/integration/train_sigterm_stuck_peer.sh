#!/usr/bin/env bash
# timeout: 120
# SIGTERM while a collective waits on a peer that will never answer (here
# a rank frozen with SIGSTOP, as a host lost without a word looks from
# its peers): the rank aborts the communicator within about a step's time
# and exits 143 within 1 s, with a warning that names the stop and no
# error file (the cause is elsewhere); it writes no checkpoint of the
# unfinished step. Over shared memory and over TCP (--no-shm).
source "$(dirname "$0")/../lib/train.bash"
port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
args=(--data synthetic --input-shape 3x16x16 --synthetic-size 100000 --threads 1 --no-eval
      --device cpu --log-every 1 --batch-size 8 --timeout 60 --ckpt-every 2)
scenario() { # name, extra flags...
    local name=$1 r0 r1 rc t0 ms
    shift
    export MASTER_ADDR=127.0.0.1 MASTER_PORT=$(port) WORLD_SIZE=2 LOCAL_WORLD_SIZE=2
    RANK=0 LOCAL_RANK=0 TORCHELASTIC_ERROR_FILE=$SCRATCH/$name.err0 ddp-train "${args[@]}" "$@" \
        --ckpt-dir "$SCRATCH/$name" > "$SCRATCH/$name.0.log" 2>&1 &
    r0=$!
    RANK=1 LOCAL_RANK=1 ddp-train "${args[@]}" "$@" --ckpt-dir "$SCRATCH/$name.1" \
        > "$SCRATCH/$name.1.log" 2>&1 &
    r1=$!
    PIDS+=($r0 $r1)
    for _ in $(seq 600); do grep -q "step 5/" "$SCRATCH/$name.0.log" && break; sleep 0.05; done
    grep -q "step 5/" "$SCRATCH/$name.0.log" || { echo "$name: no step 5"; cat "$SCRATCH/$name.0.log"; exit 1; }
    kill -STOP "$r1"
    sleep 0.5 # rank 0 is now waiting on rank 1 in the next step
    t0=$(date +%s%N)
    kill -TERM "$r0"
    rc=0
    wait "$r0" || rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    kill -9 "$r1" 2> /dev/null || true
    wait "$r1" 2> /dev/null || true
    [ $rc -eq 143 ] || { echo "$name: rank 0 exited $rc, not 143"; cat "$SCRATCH/$name.0.log"; exit 1; }
    [ $ms -lt 1000 ] || { echo "$name: rank 0 took $ms ms to stop"; cat "$SCRATCH/$name.0.log"; exit 1; }
    grep -q "stopping on SIGTERM: .* aborted" "$SCRATCH/$name.0.log" ||
        { echo "$name: no warning naming the abort"; cat "$SCRATCH/$name.0.log"; exit 1; }
    [ ! -e "$SCRATCH/$name.err0" ] || { echo "$name: an error file was written"; exit 1; }
    local last
    last=$(ls "$SCRATCH/$name" | tail -n 1)
    [ -n "$last" ] || { echo "$name: no checkpoint at all"; exit 1; }
    local step=$((10#$(echo "$last" | sed 's/ckpt-\([0-9]*\).ddpt/\1/')))
    [ $((step % 2)) -eq 0 ] || { echo "$name: a checkpoint of an unfinished step: $last"; exit 1; }
    echo "$name: stopped in $ms ms; newest checkpoint $last"
}
scenario shm
scenario tcp --no-shm
