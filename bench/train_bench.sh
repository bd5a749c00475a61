#!/usr/bin/env bash
# make bench-train: ddp-train against PyTorch on the CPU, in the same run on
# the same machine: ResNet-20, 1x28x28 inputs, batch 128, 2 threads, one
# process each; images per second after warm-up and peak resident memory.
# Targets: at least 1.2x PyTorch's img/s, at most its peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${BENCH_STEPS:-40}
rounds=${BENCH_ROUNDS:-3}
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null || { echo "bench-train needs Debian's python3-torch"; exit 1; }
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)), load $(cut -d' ' -f1 /proc/loadavg)"
echo "command: make bench-train (BENCH_STEPS=$steps BENCH_ROUNDS=$rounds)"

ours() { # prints img/s and peak RSS (MiB) of one ddp-train run
    local out
    out=$( { /usr/bin/time -f 'peak_kib=%M' env OMP_NUM_THREADS=2 build/bin/ddp-train \
        --model resnet20 --data synthetic --input-shape 1x28x28 --batch-size 128 --threads 2 \
        --max-steps $((steps + 5)) --log-every 100000 --no-eval --throughput-warmup 5 2>&1; } 2>&1)
    local ips kib
    ips=$(echo "$out" | sed -n 's/.*img\/s=\([0-9.]*\).*/\1/p' | tail -n1)
    kib=$(echo "$out" | sed -n 's/.*peak_kib=\([0-9]*\).*/\1/p' | tail -n1)
    echo "$ips $(awk -v k="$kib" 'BEGIN{printf "%.1f", k/1024}')"
}
theirs() {
    OMP_NUM_THREADS=2 $py bench/torch_train.py --threads 2 --steps "$steps" --warmup 5 |
        sed -n 's/.*img_per_s=\([0-9.]*\) peak_rss_mib=\([0-9.]*\).*/\1 \2/p'
}
median() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
: > /tmp/bench-train.$$
for r in $(seq "$rounds"); do
    echo "ours $(ours)" >> /tmp/bench-train.$$
    echo "torch $(theirs)" >> /tmp/bench-train.$$
done
o_ips=$(awk '$1=="ours"{print $2}' /tmp/bench-train.$$ | median)
t_ips=$(awk '$1=="torch"{print $2}' /tmp/bench-train.$$ | median)
o_rss=$(awk '$1=="ours"{print $3}' /tmp/bench-train.$$ | median)
t_rss=$(awk '$1=="torch"{print $3}' /tmp/bench-train.$$ | median)
rm -f /tmp/bench-train.$$
printf '\n| | ddp-train | PyTorch | ratio |\n| --- | ---: | ---: | ---: |\n'
printf '| img/s (median of %d) | %s | %s | %.2fx |\n' "$rounds" "$o_ips" "$t_ips" "$(awk -v a="$o_ips" -v b="$t_ips" 'BEGIN{print a/b}')"
printf '| peak RSS MiB | %s | %s | %.2fx |\n' "$o_rss" "$t_rss" "$(awk -v a="$o_rss" -v b="$t_rss" 'BEGIN{print a/b}')"
echo
awk -v a="$o_ips" -v b="$t_ips" 'BEGIN{print (a >= 1.2*b ? "img/s target (>= 1.2x): met" : "img/s target (>= 1.2x): NOT met")}'
awk -v a="$o_rss" -v b="$t_rss" 'BEGIN{print (a <= b ? "memory target (<= PyTorch): met" : "memory target (<= PyTorch): NOT met")}'
