#!/usr/bin/env bash
# timeout: 240
# isa: AVX2 SSE41
# Three test hosts (network namespaces on a bridge, tests/lib/netbed.bash)
# x two workers train one job: TCP between the hosts, shared memory within
# each, checkpoints on every host, each its own (no shared file system, the
# same files). Two steps run;
# the weights after the first equal those of one host running the same six
# ranks to 1e-6 (the same global batch; only the all-reduce's path
# differs, so the gradients agree to rounding). Not after the second: the
# first step's last-bit differences put some ReLU input within rounding of
# zero on one side in one run and on the other in the other, and such an
# element moves a gradient by percents (docs/results.md, numerics); which
# element that is depends on the CPU's kernels (AVX2 machines saw 2.5e-3).
# Without SyncBatchNorm: with it, the statistics differ in step 1 already.
source "$(dirname "$0")/../lib/train.bash"
TMP=$SCRATCH
source "$(dirname "$0")/../lib/netbed.bash"
have_numpy || { echo "skipped: numpy (python3-numpy) is not installed"; exit 77; }
netbed_up 3
common=(--model resnet20 --data synthetic --input-shape 3x16x16 --threads 1 --no-eval
        --log-every 1000 --max-steps 2 --seed 3 --ckpt-every 1)
port=29611
for h in 1 2 3; do
    netbed_exec "$h" ddprun --nnodes=3 --nproc-per-node=2 --rdzv-backend=c10d \
        --rdzv-endpoint="$(netbed_addr 1):$port" --rdzv-id=net3 --no-python \
        ddp-train "${common[@]}" --batch-size 8 --ckpt-dir "$NETBED_DIR/h$h/ck" \
        > "$NETBED_DIR/h$h/run.log" 2>&1 &
    PIDS+=($!)
done
rc=0
for p in "${PIDS[@]}"; do wait "$p" || rc=1; done
show() { for h in 1 2 3; do echo "--- host $h"; tail -n 20 "$NETBED_DIR/h$h/run.log"; done; }
[ $rc -eq 0 ] || { echo "a host's ddprun failed"; show; exit 1; }
grep -q "6 ranks" "$NETBED_DIR/h1/run.log" || { echo "rank 0 did not see 6 ranks"; show; exit 1; }
# Every host writes its own --ckpt-dir (no shared file system), the same state.
for h in 2 3; do
    [ -e "$NETBED_DIR/h$h/ck/ckpt-0000000001.ddpt" ] || { echo "host $h wrote no checkpoint"; show; exit 1; }
    compare "$NETBED_DIR/h$h/ck/ckpt-0000000002.ddpt" "$NETBED_DIR/h1/ck/ckpt-0000000002.ddpt" \
        --exact > /dev/null || { echo "host $h's checkpoint differs from host 1's"; exit 1; }
done
ddprun --standalone --nproc-per-node=6 --no-python ddp-train "${common[@]}" --batch-size 8 \
    --ckpt-dir "$SCRATCH/one" > "$SCRATCH/one.log" 2>&1 || { cat "$SCRATCH/one.log"; exit 1; }
first=ckpt-0000000001.ddpt
compare "$NETBED_DIR/h1/ck/$first" "$SCRATCH/one/$first" --rtol 1e-6
grep -h "hosts\|ring\|ranks" "$NETBED_DIR/h1/run.log" | head -3
