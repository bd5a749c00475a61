#!/usr/bin/env bash
# timeout: 60
# A peer lost while a rank is resuming (rank 0 sends the checkpoint
# header's length, then dies before the header): the surviving rank exits 1
# with a log line and an error file that say the broadcast of the
# checkpoint failed, not silently.
source "$(dirname "$0")/../lib/train.bash"
TOOL=$ROOT/build/tests/rank-leaves
[ -x "$TOOL" ] || { echo "skipped: build/tests/rank-leaves is not built"; exit 77; }
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 LOCAL_WORLD_SIZE=2
RANK=0 LOCAL_RANK=0 "$TOOL" 4096 > "$SCRATCH/rank0.log" 2>&1 &
PIDS+=($!)
rc=0
RANK=1 LOCAL_RANK=1 TORCHELASTIC_ERROR_FILE=$SCRATCH/error.json \
    ddp-train --data synthetic --input-shape 3x8x8 --synthetic-size 64 --threads 1 --no-eval \
    --device cpu --no-shm --batch-size 4 --timeout 20 --ckpt-dir "$SCRATCH/ck" > "$SCRATCH/rank1.log" 2>&1 || rc=$?
show() { echo "--- rank 0"; cat "$SCRATCH/rank0.log"; echo "--- rank 1"; cat "$SCRATCH/rank1.log"; }
grep -q "leaving" "$SCRATCH/rank0.log" || { echo "rank 0 never got to the header"; show; exit 1; }
[ $rc -eq 1 ] || { echo "rank 1 exited $rc, not 1"; show; exit 1; }
grep -q "rank 1: .*checkpoint" "$SCRATCH/rank1.log" ||
    { echo "rank 1 logged no error naming the checkpoint's broadcast"; show; exit 1; }
[ -s "$SCRATCH/error.json" ] || { echo "rank 1 wrote no error file"; show; exit 1; }
grep -q "checkpoint" "$SCRATCH/error.json" || { echo "error file:"; cat "$SCRATCH/error.json"; exit 1; }
echo "rank 1: $(grep 'rank 1:' "$SCRATCH/rank1.log" | head -n1)"
