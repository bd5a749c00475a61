#!/usr/bin/env bash
# make bench-chaos-hosts: goodput under host losses, ours and torchrun's
# side by side on three test hosts (network namespaces on a bridge,
# tests/lib/netbed.bash; root needed). Each job trains STEPS steps of
# ResNet-20 (synthetic 1x28x28, batch 32 per rank, one worker per host,
# --nnodes=2:3, c10d rendezvous on host 1, at most 100 restarts), once
# without failures and once losing a host every LOSE_EVERY seconds: host 2
# or 3 (host 1 holds both sides' rendezvous store) loses its link without a
# word and every process on it dies, as a machine that loses power; after
# BACK_AFTER seconds a replacement (a fresh agent on the same host, its
# link back) joins the job.
#   - ours: ddprun + ddp-train --ckpt-every 20, each host's own --ckpt-dir
#     (no shared file system), the snapshots in the agents' memory;
#   - torchrun (Debian's torch 1.13): bench/torch_chaos_train.py, PyTorch
#     DDP over gloo saving with torch.save every 20 steps, into a directory
#     every host shares (the tutorial's script needs one: each rank loads
#     the file at start).
# A failing run is stopped after CAP x its clean run's time. Goodput:
# (steps kept / STEPS) x the clean time / the time with failures; steps
# done twice (ours: a step rank 0 printed again after a restart). PEER=0:
# ours alone. The survivors notice a silent loss by the lost agent's
# heartbeat (keep_alive_interval, 5 s by default): most of what a loss
# costs ours.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
STEPS=${STEPS:-300}
LOSE_EVERY=${LOSE_EVERY:-15}
BACK_AFTER=${BACK_AFTER:-5}
CAP=${CAP:-3}
ROOT=$PWD
export PATH=$ROOT/build/bin:$PATH
source tests/lib/agent.bash
source tests/lib/netbed.bash
netbed_up 3
mkdir -p "$NETBED_DIR/shared"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)), load $(cut -d' ' -f1 /proc/loadavg)"
echo "command: make bench-chaos-hosts (STEPS=$STEPS LOSE_EVERY=$LOSE_EVERY BACK_AFTER=$BACK_AFTER CAP=$CAP)"
# No process of its own per turn of the watching loop (see chaos_bench.sh):
# bash's clock in microseconds, a read that times out for a pause.
exec {NAP}<> <(:)
nap() { read -r -t "$1" -u "$NAP" _ || :; }
us() { US=${EPOCHREALTIME/./}; }
secs() { printf '%d.%06d' $(($1 / 1000000)) $(($1 % 1000000)); }

# One host's side of a job (name port host), in the background; every
# process of it carries DDPRUN_TEST_TAG=$TAG.hH (host_pids).
ours_on() {
    netbed_exec "$3" env DDPRUN_TEST_TAG="$TAG.h$3" OMP_NUM_THREADS=1 ddprun --nnodes=2:3 \
        --nproc-per-node=1 --max-restarts=100 --rdzv-backend=c10d \
        --rdzv-endpoint="$(netbed_addr 1):$2" --rdzv-id="$1" --no-python \
        ddp-train --model resnet20 --data synthetic --input-shape 1x28x28 --batch-size 32 \
        --threads 1 --no-eval --log-every 1 --max-steps "$STEPS" --ckpt-every 20 --seed 1 \
        --ckpt-dir "$NETBED_DIR/h$3/$1" >> "$TMP/$1.h$3.out" 2>> "$TMP/$1.h$3.err" &
    AGENTS[$3]=$!
}
theirs_on() {
    # (--redirects/--tee: Debian's torch 1.13 on Python 3.11 fails without them)
    netbed_exec "$3" env DDPRUN_TEST_TAG="$TAG.h$3" GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
        /usr/bin/python3 -m torch.distributed.run --nnodes=2:3 --nproc_per_node=1 \
        --max_restarts=100 --rdzv_backend=c10d --rdzv_endpoint="$(netbed_addr 1):$2" \
        --rdzv_id="$1" --monitor_interval=0.1 --redirects 2 --tee 1 \
        "$ROOT/bench/torch_chaos_train.py" --steps "$STEPS" \
        --snapshot "$NETBED_DIR/shared/$1.pt" >> "$TMP/$1.h$3.out" 2>> "$TMP/$1.h$3.err" &
    AGENTS[$3]=$!
}
host_pids() {
    local f p
    for f in /proc/[0-9]*/environ; do
        grep -qzx "DDPRUN_TEST_TAG=$TAG.h$1" "$f" 2> /dev/null || continue
        p=${f#/proc/}
        echo "${p%/environ}"
    done
}
# A host lost: its link down, and everything on it dead at once.
lose_host() {
    local p
    netbed_link "$1" down
    for p in $(host_pids "$1"); do kill -9 "$p" 2> /dev/null; done
    wait "${AGENTS[$1]}" 2> /dev/null
    AGENTS[$1]=""
}
sweep_hosts() { local h p; for h in 1 2 3; do for p in $(host_pids "$h"); do kill -9 "$p" 2> /dev/null; done; done; }
# (before the bed goes: what a stopped bench left running on a host)
trap "sweep_hosts; $(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")" EXIT
running() { local h; for h in 1 2 3; do [ -n "${AGENTS[$h]}" ] && kill -0 "${AGENTS[$h]}" 2> /dev/null && return 0; done; return 1; }

# run SIDE NAME PORT LOSE CAP_S: prints "seconds losses steps_kept redone"
run() {
    local side=$1 name=$2 port=$3 lose=$4 cap_us t0 losses=0 next back=0 down="" h kept redone
    cap_us=$(echo "$5 * 1000000 / 1" | bc)
    AGENTS=([1]="" [2]="" [3]="")
    us
    t0=$US
    for h in 1 2 3; do "${side}_on" "$name" "$port" "$h"; done
    next=$((t0 + LOSE_EVERY * 1000000))
    while running; do
        us
        if ((US - t0 > cap_us)); then
            sweep_hosts
            break
        fi
        if [ "$lose" = 1 ] && [ -z "$down" ] && ((US > next)); then
            down=$((2 + RANDOM % 2))
            lose_host "$down"
            losses=$((losses + 1))
            us
            back=$((US + BACK_AFTER * 1000000))
        fi
        if [ -n "$down" ] && ((US > back)); then
            netbed_link "$down" up
            "${side}_on" "$name" "$port" "$down"
            down=""
            us
            next=$((US + (LOSE_EVERY - BACK_AFTER) * 1000000))
        fi
        nap 0.1
    done
    us
    local t=$((US - t0))
    for h in 1 2 3; do [ -n "${AGENTS[$h]}" ] && wait "${AGENTS[$h]}" 2> /dev/null; done
    [ -n "$down" ] && netbed_link "$down" up
    kept=0
    cat "$TMP/$name".h*.out 2> /dev/null | grep -q "done: $STEPS steps" && kept=$STEPS
    # steps rank 0 printed (on whichever host it was) more than once
    redone=$(cat "$TMP/$name".h*.out 2> /dev/null | sed -n 's/.* step \([0-9]*\)\/.*/\1/p' |
        sort | uniq -d | grep -c .)
    echo "$(secs "$t") $losses $kept $redone"
}
report() { # label clean seconds losses kept redone
    printf '%-44s %6.1f s, %d host losses, %3d of %d steps, goodput %.2f, %.2f s lost per loss%s\n' \
        "$1" "$3" "$4" "$5" "$STEPS" "$(echo "$5 / $STEPS * $2 / $3" | bc -l)" \
        "$(echo "($3 - $2) / ($4 + ($4 == 0))" | bc -l)" "${6:+, $6 steps done twice}"
    GOODPUT=$(echo "$5 / $STEPS * $2 / $3" | bc -l)
}
read -r ours_clean _ _ _ < <(run ours ours-clean 29801 0 100000)
printf '%-44s %6.1f s\n' "ours, no failures" "$ours_clean"
read -r t l k r < <(run ours ours-lose 29802 1 "$(echo "$CAP * $ours_clean" | bc)")
report "ours, hosts lost" "$ours_clean" "$t" "$l" "$k" "$r"
ours_goodput=$GOODPUT
grep -h "resuming from" "$TMP"/ours-lose.h*.out "$TMP"/ours-lose.h*.err 2> /dev/null | sed 's/^/    /' | sort -u | head -n 10
if [ "${PEER:-1}" = 1 ] && /usr/bin/python3 -c "import torch" 2> /dev/null; then
    read -r their_clean _ _ _ < <(run theirs theirs-clean 29803 0 100000)
    printf '%-44s %6.1f s\n' "torchrun, no failures" "$their_clean"
    read -r t l k _ < <(run theirs theirs-lose 29804 1 "$(echo "$CAP * $their_clean" | bc)")
    report "torchrun, hosts lost (shared file system)" "$their_clean" "$t" "$l" "$k" ""
    printf 'goodput ratio (ours / torchrun): %s\n' \
        "$(echo "$GOODPUT > 0" | bc | grep -q 1 && echo "scale=2; $ours_goodput / $GOODPUT" | bc || echo "inf (torchrun kept nothing)")"
elif [ "${PEER:-1}" = 1 ]; then
    echo "torchrun's side skipped: Debian's python3-torch is not installed"
fi
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$TMP"/*.out "$TMP"/*.err "$KEEP"/; fi
