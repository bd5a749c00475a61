#!/usr/bin/env bash
# make bench-recovery: seconds from a silent host loss to the survivors'
# first training step in the re-formed group, ours against torchrun, in
# one run on the same three test hosts (network namespaces on a bridge,
# tests/lib/netbed.bash; root needed). Both run an elastic job
# (--nnodes=2:3, two workers per host, --max-restarts=3, c10d rendezvous on
# host 1, default heartbeats): ours ddp-train, torchrun (Debian's torch
# 1.13) bench/recovery_worker.py (PyTorch DDP over gloo, the same
# ResNet-20). Once host 1 reports step 12, host 3's link goes down (no FIN,
# no RST); the clock stops at host 1's first step of the new group, or at
# CAP seconds. ROUNDS runs of each, taking turns; medians.
# Target: at most 12 s, and at most 1/3 of torchrun's time.
set -uo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
CAP=${CAP:-120}
/usr/bin/python3 -c 'import torch' 2> /dev/null || { echo "bench-recovery needs Debian's python3-torch"; exit 1; }
source tests/lib/agent.bash
source tests/lib/netbed.bash
netbed_up 3
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)), load $(cut -d' ' -f1 /proc/loadavg)"
echo "command: make bench-recovery (ROUNDS=$ROUNDS CAP=$CAP)"
ours() { # name port: the elastic job of tests/integration/net_host_lost.sh
    netbed_elastic "$1" "$2" --model resnet20 --data synthetic --input-shape 3x16x16 \
        --synthetic-size 1000000 --threads 1 --no-eval --log-every 1 --batch-size 8 --ckpt-every 5
}
theirs() { # name port
    local h
    for h in 1 2 3; do
        netbed_run "$h" env DDPRUN_TEST_TAG="$TAG" GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
            /usr/bin/python3 -m torch.distributed.run --nnodes=2:3 --nproc_per_node=2 \
            --max_restarts=3 --rdzv_backend=c10d --rdzv_endpoint="$(netbed_addr 1):$2" \
            --rdzv_id="$1" --monitor_interval=0.1 --redirects 2 --tee 1 \
            "$ROOT/bench/recovery_worker.py" > "$TMP/$1.h$h.out" 2> "$TMP/$1.h$h.err" &
        PIDS+=($!)
    done
}
# The number of step lines host 1 printed, and whether one came from a new group.
steps() { grep -c "step [0-9]*" "$TMP/$1.h1.out" 2> /dev/null || echo 0; }
new_group_step() { # name kind t0
    if [ "$2" = ours ]; then
        sed -n '/(round [1-9])/,$p' "$TMP/$1.h1.err" | grep -q "resuming\|parameters" &&
            [ "$(steps "$1")" -gt "$before" ]
    else
        # torchrun's --tee prefixes "[default0]:"
        awk -v t0="$3" '/step [0-9]+ start [0-9]+$/ && $NF > t0 { found = 1 } END { exit !found }' \
            "$TMP/$1.h1.out"
    fi
}
measure() { # kind name port: prints seconds, or "cap"
    local t0 end
    "$1" "$2" "$3"
    for _ in $(seq 1200); do grep -q "step 12\b" "$TMP/$2.h1.out" 2> /dev/null && break; sleep 0.1; done
    if ! grep -q "step 12\b" "$TMP/$2.h1.out" 2> /dev/null; then
        echo "$2 never reached step 12:" >&2
        tail -n 5 "$TMP/$2".h*.err >&2
        echo fail
        return
    fi
    before=$(steps "$2")
    t0=$(now_ms)
    netbed_link 3 down
    end=cap
    while [ $(($(now_ms) - t0)) -lt $((CAP * 1000)) ]; do
        if new_group_step "$2" "$1" "$t0"; then end=$(awk -v ms=$(($(now_ms) - t0)) 'BEGIN{printf "%.2f", ms/1000}'); break; fi
        sleep 0.05
    done
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2> /dev/null; done
    for p in $(tagged_pids); do kill -KILL "$p" 2> /dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2> /dev/null; done
    PIDS=()
    netbed_link 3 up
    echo "$end"
}
# KEEP=DIR keeps every host's output there.
keep() { if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$TMP"/*.out "$TMP"/*.err "$KEEP"/; fi; }
median() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
o=() t=()
for r in $(seq "$ROUNDS"); do
    o+=("$(measure ours "ours$r" $((29700 + r)))")
    t+=("$(measure theirs "theirs$r" $((29750 + r)))")
    echo "round $r: ours ${o[-1]} s, torchrun ${t[-1]} s" >&2
done
mo=$(printf '%s\n' "${o[@]}" | grep -v cap | median)
ncap=$(printf '%s\n' "${t[@]}" | grep -c cap)
mt=$(printf '%s\n' "${t[@]}" | grep -v cap | median)
echo
echo "| | ddprun + ddp-train | torchrun + DDP (gloo) | ratio |"
echo "| --- | ---: | ---: | ---: |"
if [ "$ncap" -gt $((ROUNDS / 2)) ]; then
    echo "| loss -> first step of the new group (median of $ROUNDS) | ${mo:-cap} s | no recovery within $CAP s ($ncap of $ROUNDS runs) | - |"
    ratio=0
else
    ratio=$(awk -v a="${mo:-1e9}" -v b="$mt" 'BEGIN{printf "%.3f", a/b}')
    echo "| loss -> first step of the new group (median of $ROUNDS) | ${mo:-cap} s | $mt s | $ratio |"
fi
echo
echo "runs: ours ${o[*]}; torchrun ${t[*]}"
keep
if printf '%s\n' "${o[@]}" "${t[@]}" | grep -q fail; then echo "a job did not start: no result"; exit 1; fi
awk -v m="${mo:-1e9}" -v r="$ratio" -v n="$ncap" -v R="$ROUNDS" 'BEGIN{
    ok = m <= 12 && (r <= 1/3 || n > R/2);
    printf "target (<= 12 s and <= 1/3 of torchrun): %s\n", ok ? "met" : "not met" }'
