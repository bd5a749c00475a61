#!/usr/bin/env bash
# timeout: 180
# --precision bf16 on the CPU, where it is emulated (fp32 arithmetic rounded
# to bf16, the GPU's numerics): two ranks train ResNet-20 on Fashion-MNIST
# as well as in fp32 over the same steps, the run says it is emulated, and
# its checkpoint (fp32 master weights) resumes in fp32.
source "$(dirname "$0")/../lib/train.bash"
args=("${TRAIN_ARGS[@]}" --device cpu --batch-size 32 --seed 9)
run() { # name, precision, steps
    ddprun --standalone --nproc-per-node=2 --no-python ddp-train "${args[@]}" --precision "$2" \
        --max-steps "$3" --ckpt-dir "$SCRATCH/$1" --metrics "$SCRATCH/$1.json" \
        > "$SCRATCH/$1.log" 2>&1 || { cat "$SCRATCH/$1.log"; exit 1; }
}
run fp32 fp32 40
run bf16 bf16 40
grep -q 'cpu (bf16, emulated)' "$SCRATCH/bf16.log" || { cat "$SCRATCH/bf16.log"; exit 1; }
grep -q 'warning: --precision bf16 on the CPU is emulated' "$SCRATCH/bf16.log" ||
    { echo "no warning that bf16 is emulated:"; cat "$SCRATCH/bf16.log"; exit 1; }
if grep -q 'emulated' "$SCRATCH/fp32.log"; then cat "$SCRATCH/fp32.log"; exit 1; fi

# Both learn (the mean loss of the last 10 steps well under the first 5's),
# and bf16 ends within 15% of fp32 (two runs of 40 steps at batch 64 that differ
# in the last bits part ways by about 10%, either way).
/usr/bin/python3 - "$SCRATCH/fp32.json" "$SCRATCH/bf16.json" <<'EOF'
import json, sys
def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"loss"' in l]
f, h = losses(sys.argv[1]), losses(sys.argv[2])
assert len(f) == len(h) == 40, (len(f), len(h))
mean = lambda v: sum(v) / len(v)
for name, l in (("fp32", f), ("bf16", h)):
    assert mean(l[-10:]) < 0.75 * mean(l[:5]), f"{name} did not learn: {l}"
gap = abs(mean(h[-10:]) - mean(f[-10:])) / mean(f[-10:])
assert gap < 0.15, f"bf16 ends {gap:.1%} from fp32: {mean(h[-10:]):.4f} vs {mean(f[-10:]):.4f}"
print(f"last-10 mean loss: fp32 {mean(f[-10:]):.4f}, bf16 {mean(h[-10:]):.4f} ({gap:.1%})")
EOF

# The bf16 run's checkpoint goes on in fp32.
ddprun --standalone --nproc-per-node=2 --no-python ddp-train "${args[@]}" --precision fp32 \
    --max-steps 44 --ckpt-dir "$SCRATCH/bf16" > "$SCRATCH/resume.log" 2>&1 ||
    { cat "$SCRATCH/resume.log"; exit 1; }
grep -q 'resuming from .*ckpt-0000000040.ddpt: epoch 1, step 40' "$SCRATCH/resume.log" ||
    { cat "$SCRATCH/resume.log"; exit 1; }
# Four steps are fewer than the throughput warm-up: img/s counts them all
# rather than printing 0.
grep -Eq '^done: 44 steps, img/s=[1-9][0-9]*\.[0-9]$' "$SCRATCH/resume.log" || { cat "$SCRATCH/resume.log"; exit 1; }
echo "bf16 on the CPU trains like fp32 and resumes in fp32"
