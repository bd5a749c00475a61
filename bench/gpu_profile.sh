#!/usr/bin/env bash
# Where a ddp-train step spends its GPU time, kernel by kernel: Nsight
# Compute (ncu, leaving the clocks alone) times every kernel of a few eager
# steps of ResNet-50 (224, batch 256, bf16 unless PROFILE_PRECISION, one
# batch on the GPU) and the table sums them by kernel name, largest first.
# PROFILE_LAUNCHES (default 1500) bounds the kernels timed. Needs ncu.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v ncu > /dev/null || { echo "gpu-profile: ncu (Nsight Compute) is not installed"; exit 1; }
prec=${PROFILE_PRECISION:-bf16}
out=${OUT:-build/gpu-run}
mkdir -p "$out"
csv=$out/profile-$prec.csv
timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-count "${PROFILE_LAUNCHES:-1500}" \
    build/bin/ddp-train --device cuda --precision "$prec" --model resnet50 --data synthetic \
    --input-shape 3x224x224 --classes 1000 --batch-size 256 --max-steps 3 --no-eval \
    --no-augment --fixed-batch --no-cuda-graph --log-every 1 > "$csv" 2> "$out/profile-$prec.err"
echo "ncu exit $? ($(grep -c gpu__time_duration "$csv") kernels timed)"
python3 - "$csv" <<'PYEOF'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, rows = rows[0], rows[1:]
ki, vi, ui = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
tot = collections.Counter(); cnt = collections.Counter()
for r in rows:
    v = float(r[vi].replace(",", ""))
    v *= {"nsecond": 1e-3, "usecond": 1, "msecond": 1e3}.get(r[ui], 1)
    name = r[ki].split("(")[0][:90]
    tot[name] += v; cnt[name] += 1
all_us = sum(tot.values())
print(f"{len(rows)} kernels, {all_us/1e3:.1f} ms in all")
for name, us in tot.most_common(25):
    print(f"{us/1e3:9.2f} ms {100*us/all_us:5.1f}% {cnt[name]:5d}x  {name}")
PYEOF
