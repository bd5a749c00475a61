#!/usr/bin/env bash
# make bench-chaos: goodput under failures, as a user feels it. One job
# (ddprun --standalone, two workers, --max-restarts 1000) trains STEPS
# steps of ResNet-20 (synthetic 1x28x28, batch 32 per rank, --ckpt-every
# 20); one run without failures, then runs with one random worker
# SIGKILLed every KILL_EVERY seconds: with snapshots in the agent's memory
# (the default) and without them (--snapshot-every 0: the checkpoints
# alone, as before). Prints each run's wall time, the kills, goodput (the
# time without failures / the time with them: every run trains all STEPS
# steps) and the seconds lost per kill.
# Target (the zero-loss issue): goodput at least 0.95 with a kill every 8 s,
# at most 0.5 s lost per kill.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
STEPS=${STEPS:-400}
KILL_EVERY=${KILL_EVERY:-8}
export PATH=$PWD/build/bin:$PATH
TMP=$(mktemp -d /tmp/ddprun-chaos.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)), load $(cut -d' ' -f1 /proc/loadavg)"
echo "command: make bench-chaos (STEPS=$STEPS KILL_EVERY=$KILL_EVERY)"
train=(--model resnet20 --data synthetic --input-shape 1x28x28 --batch-size 32 --threads 1
       --no-eval --log-every 1000 --max-steps "$STEPS" --ckpt-every 20 --seed 1)
now() { date +%s.%N; }
# run NAME KILLS? [ddp-train args...]: prints "seconds kills"
run() {
    local name=$1 kill=$2 t0 agent kills=0 next victims v
    shift 2
    rm -rf "${TMP:?}/${name:?}"
    t0=$(now)
    OMP_NUM_THREADS=1 ddprun --standalone --nproc-per-node 2 --max-restarts 1000 --no-python \
        ddp-train "${train[@]}" --ckpt-dir "$TMP/$name" "$@" > "$TMP/$name.log" 2>&1 &
    agent=$!
    next=$(echo "$(now) + $KILL_EVERY" | bc)
    while kill -0 "$agent" 2> /dev/null; do
        if [ "$kill" = 1 ] && [ "$(echo "$(now) >= $next" | bc)" = 1 ]; then
            mapfile -t victims < <(pgrep -P "$agent")
            if [ "${#victims[@]}" -gt 0 ]; then
                v=${victims[$((RANDOM % ${#victims[@]}))]}
                kill -9 "$v" 2> /dev/null && kills=$((kills + 1))
            fi
            next=$(echo "$(now) + $KILL_EVERY" | bc)
        fi
        sleep 0.05
    done
    wait "$agent" || { echo "$name: the job failed" >&2; tail -n 20 "$TMP/$name.log" >&2; }
    grep -q "done: $STEPS steps" "$TMP/$name.log" || echo "$name: did not train $STEPS steps" >&2
    echo "$(echo "$(now) - $t0" | bc) $kills"
}
read -r clean _ < <(run clean 0)
printf '%-34s %7.1f s\n' "no failures" "$clean"
for variant in snapshots nosnap; do
    args=()
    [ "$variant" = nosnap ] && args=(--snapshot-every 0)
    read -r t kills < <(run "$variant" 1 "${args[@]}")
    label="kill every ${KILL_EVERY} s, $([ "$variant" = snapshots ] && echo "memory snapshots" || echo "checkpoints only")"
    printf '%-34s %7.1f s, %2d kills, goodput %.2f, %.2f s lost per kill\n' "$label" "$t" "$kills" \
        "$(echo "$clean / $t" | bc -l)" "$(echo "($t - $clean) / ($kills + ($kills == 0))" | bc -l)"
    grep -h "snapshots in memory" "$TMP/$variant.log" | tail -n 1
done
