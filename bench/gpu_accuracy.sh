#!/usr/bin/env bash
# The GPU's accuracy run: ResNet-20 on Fashion-MNIST under ddprun with the
# CPU accuracy run's recipe (docs/results.md, "Training": global batch 256,
# SGD lr 0.1 with momentum 0.9, weight decay 5e-4 not on BN and biases,
# one warm-up epoch then cosine, random crop + flip, 15 epochs), here on
# one GPU as one rank of 256. Prints each epoch's test accuracy, the wall
# time, and whether 93% was reached. GPU_ACC_EPOCHS, GPU_ACC_PRECISION
# (fp32), GPU_ACC_DATA (the Fashion-MNIST folder; default Debian's).
set -uo pipefail
cd "$(dirname "$0")/.."
epochs=${GPU_ACC_EPOCHS:-15}
prec=${GPU_ACC_PRECISION:-fp32}
data=${GPU_ACC_DATA:-/usr/share/datasets/fashion-mnist}
work=$(mktemp -d /tmp/gpu-accuracy.XXXXXX)
trap 'rm -rf "$work"' EXIT
cmd=(build/bin/ddprun --standalone --nproc-per-node=1 --no-python build/bin/ddp-train
     --device cuda --precision "$prec" --model resnet20 --data fashion-mnist --data-dir "$data"
     --epochs "$epochs" --batch-size 256 --lr 0.1 --warmup-epochs 1 --ckpt-dir "$work/ckpt"
     --log-every 100 --metrics "$work/metrics.jsonl")
echo "\$ ${cmd[*]}"
t0=$(date +%s.%N)
"${cmd[@]}" > "$work/out" 2> "$work/err"
rc=$?
t1=$(date +%s.%N)
grep -E "^epoch [0-9]+ test|^done" "$work/out"
[ $rc -eq 0 ] || { echo "gpu-accuracy: ddprun exited $rc"; tail -n 20 "$work/err"; exit 1; }
best=$(sed -n 's/^epoch \([0-9]*\) test: .*accuracy \([0-9.]*\)%.*/\1 \2/p' "$work/out" | sort -k2 -n | tail -n1)
last=$(sed -n 's/^epoch \([0-9]*\) test: .*accuracy \([0-9.]*\)%.*/\2/p' "$work/out" | tail -n1)
first93=$(sed -n 's/^epoch \([0-9]*\) test: .*accuracy \([0-9.]*\)%.*/\1 \2/p' "$work/out" | awk '$2 >= 93 {print $1; exit}')
printf 'gpu-accuracy: %s epochs in %.1f s; last %s%%, best %s%% (epoch %s); 93%% %s\n' "$epochs" \
    "$(awk -v a="$t0" -v b="$t1" "BEGIN{print b - a}")" "$last" "${best#* }" "${best% *}" \
    "$([ -n "$first93" ] && echo "reached at epoch $first93" || echo "NOT reached")"
[ -n "$first93" ]
