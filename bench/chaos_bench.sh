#!/usr/bin/env bash
# make bench-chaos: goodput under failures, as a user feels it, ours and
# torchrun's side by side. Each job trains STEPS steps of ResNet-20
# (synthetic 1x28x28, batch 32 per rank, two workers on this machine, one
# thread each, at most 1000 restarts), once without failures and once with
# one random worker SIGKILLed every KILL_EVERY seconds:
#   - ours: ddprun --standalone + ddp-train --ckpt-every 20, with the
#     snapshots in the agent's memory (the default), and without them
#     (--snapshot-every 0: the checkpoints alone, as before);
#   - torchrun (python3 -m torch.distributed.run --standalone, with
#     TORCH_PY: Debian's torch 1.13 by default, or today's torch 2.x from
#     build/torch2-venv/bin/python, scripts/torch2-venv):
#     bench/torch_chaos_train.py, PyTorch DDP over gloo that saves with
#     torch.save every 20 steps and loads at start.
# A failing run is stopped after CAP x its clean run's time. Goodput:
# (steps kept / STEPS) x the clean time / the time with failures; and the
# seconds lost per kill; each the median of ROUNDS rounds, a round being a
# clean run and one with kills (one run of each is noise: +-2% on a 30 s
# run is the cost of all its kills). Target (the zero-loss issue): ours at least 0.95
# with a kill every 8 s, at most 0.5 s lost per kill, at least twice
# torchrun's goodput.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
STEPS=${STEPS:-400}
KILL_EVERY=${KILL_EVERY:-8}
CAP=${CAP:-3}
ROUNDS=${ROUNDS:-3}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
ROOT=$PWD
export PATH=$ROOT/build/bin:$PATH
TMP=$(mktemp -d /tmp/ddprun-chaos.XXXXXX)
AGENT=""
trap '[ -n "$AGENT" ] && kill -9 "$AGENT" 2> /dev/null; rm -rf "$TMP"' EXIT
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)), load $(cut -d' ' -f1 /proc/loadavg)"
echo "command: make bench-chaos (STEPS=$STEPS KILL_EVERY=$KILL_EVERY CAP=$CAP ROUNDS=$ROUNDS TORCH_PY=$TORCH_PY)"
echo "torchrun's torch: $("$TORCH_PY" -c 'import torch; print(torch.__version__)' 2>&1 | tail -n 1)"
# The loop that watches a job must not take the CPU the job is measured
# on (2 workers on 2 cores): no process of its own per turn (date, bc and
# sleep in it cost the kill runs 10% of their steps), so the clock is
# bash's EPOCHREALTIME in microseconds and the pause a read that times out.
exec {NAP}<> <(:)
nap() { read -r -t "$1" -u "$NAP" _ || :; }
us() { US=${EPOCHREALTIME/./}; }
secs() { printf '%d.%06d' $(($1 / 1000000)) $(($1 % 1000000)); }
ours() { # name [ddp-train args]
    local name=$1
    shift
    # exec: the background job is the agent itself, whose children are the workers
    OMP_NUM_THREADS=1 exec ddprun --standalone --nproc-per-node 2 --max-restarts 1000 --no-python \
        ddp-train --model resnet20 --data synthetic --input-shape 1x28x28 --batch-size 32 \
        --threads 1 --no-eval --log-every 1000 --max-steps "$STEPS" --ckpt-every 20 --seed 1 \
        --ckpt-dir "$TMP/$name" "$@"
}
theirs() { # name [VAR=value...]
    local name=$1
    shift
    # (--redirects/--tee: Debian's torch 1.13 on Python 3.11 fails without them.
    # PYTHON_EXEC: torchrun starts its workers with it when set, as these
    # machines set it to Debian's python3: the workers must run TORCH_PY's torch.)
    OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo PYTHON_EXEC=$TORCH_PY exec env "$@" \
        "$TORCH_PY" -m torch.distributed.run \
        --standalone --nproc_per_node 2 --max_restarts 1000 --monitor_interval 0.1 \
        --redirects 2 --tee 1 \
        "$ROOT/bench/torch_chaos_train.py" --steps "$STEPS" --snapshot "$TMP/$name.pt"
}
# run NAME KILL CAP_S SIDE [args]: prints "seconds kills steps_kept"
run() {
    local name=$1 kill=$2 cap=$3 side=$4 t0 kills=0 next every cap_us victims v kept
    shift 4
    cap_us=$(echo "$cap * 1000000 / 1" | bc)
    every=$(echo "$KILL_EVERY * 1000000 / 1" | bc)
    us
    t0=$US
    "$side" "$name" "$@" > "$TMP/$name.log" 2>&1 &
    AGENT=$!
    next=$((t0 + every))
    while kill -0 "$AGENT" 2> /dev/null; do
        us
        if ((US - t0 > cap_us)); then
            for v in $(pgrep -P "$AGENT"); do kill -9 "$v" 2> /dev/null; done
            kill -9 "$AGENT"
            break
        fi
        if [ "$kill" = 1 ] && ((US >= next)); then
            mapfile -t victims < <(pgrep -P "$AGENT")
            if [ "${#victims[@]}" -gt 0 ]; then
                v=${victims[$((RANDOM % ${#victims[@]}))]}
                kill -9 "$v" 2> /dev/null && kills=$((kills + 1))
            fi
            us
            next=$((US + every))
        fi
        nap 0.05
    done
    wait "$AGENT" 2> /dev/null
    us
    AGENT=""
    kept=$STEPS
    grep -q "done: $STEPS steps" "$TMP/$name.log" || kept=0
    echo "$(secs $((US - t0))) $kills $kept"
}
# goodput CLEAN SECONDS KILLS KEPT: "goodput seconds_lost_per_kill"
goodput() {
    echo "$4 / $STEPS * $1 / $2" | bc -l
    echo "($2 - $1) / ($3 + ($3 == 0))" | bc -l
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# side LABEL CLEAN_NAME KILL_NAME SIDE [args]: ROUNDS rounds, each a clean
# run and a run with kills (paired: a round's goodput uses its own clean
# time, so a machine that drifts between rounds does not count as a
# failure's cost); prints each round and the medians, sets GOODPUT.
side() {
    local label=$1 clean_name=$2 kill_name=$3 who=$4 r c t k s g=() l=() o
    shift 4
    for ((r = 1; r <= ROUNDS; r++)); do
        if [ "$clean_name" = "-" ]; then c=${CLEAN[$r]}; else
            read -r c _ _ < <(run "$clean_name$r" 0 100000 "$who")
            CLEAN[$r]=$c
        fi
        read -r t k s < <(run "$kill_name$r" 1 "$(echo "$CAP * $c" | bc)" "$who" "$@")
        mapfile -t o < <(goodput "$c" "$t" "$k" "$s")
        g+=("${o[0]}") l+=("${o[1]}")
        printf '  %-38s round %d: %5.1f s clean, %5.1f s with %2d kills, %3d of %d steps, goodput %.3f, %.2f s lost per kill\n' \
            "$label" "$r" "$c" "$t" "$k" "$s" "$STEPS" "${o[0]}" "${o[1]}"
    done
    GOODPUT=$(printf '%s\n' "${g[@]}" | median)
    printf '%-40s goodput %.3f, %.2f s lost per kill (medians of %d rounds)\n' "$label" "$GOODPUT" \
        "$(printf '%s\n' "${l[@]}" | median)" "$ROUNDS"
}
CLEAN=()
side "ours, memory snapshots" ours-clean ours-snap ours
ours_goodput=$GOODPUT
grep -h "snapshots in memory" "$TMP"/ours-snap*.log | tail -n 1
side "ours, checkpoints only" - ours-ckpt ours --snapshot-every 0
if "$TORCH_PY" -c 'import torch' 2> /dev/null; then
    side "torchrun, torch.save every 20 steps" theirs-clean theirs-kill theirs
    echo "torchrun's workers ran torch $(grep -h -o "workers' torch [^ ]*" "$TMP"/theirs-clean*.log | sed 's/.* //' | sort -u | head -n 1)"
    printf 'goodput ratio (ours with snapshots / torchrun): %s\n' \
        "$(echo "$GOODPUT > 0" | bc | grep -q 1 && echo "scale=2; $ours_goodput / $GOODPUT" | bc || echo "inf (torchrun kept nothing)")"
    # torch 2.x's torchrun shares its store with every attempt's workers,
    # whose keys carry no attempt: its documented way out, measured too.
    if [ "$("$TORCH_PY" -c 'import torch; print(torch.__version__.split(".")[0])')" -ge 2 ]; then
        side "torchrun, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" theirs-own-clean theirs-own-kill \
            theirs TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
        printf 'goodput ratio (ours with snapshots / torchrun with its own store): %s\n' \
            "$(echo "$GOODPUT > 0" | bc | grep -q 1 && echo "scale=2; $ours_goodput / $GOODPUT" | bc || echo "inf (torchrun kept nothing)")"
    fi
else
    echo "torchrun's side skipped: Debian's python3-torch is not installed"
fi
