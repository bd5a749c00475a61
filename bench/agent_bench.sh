#!/usr/bin/env bash
# Benchmarks ddprun's agent against torchrun (Debian's PyTorch 1.13:
# /usr/bin/python3 -m torch.distributed.run) in the same run, on loopback,
# with the same worker program and the same flags:
#
#  1. restart latency: from a worker's failure to every worker of the
#     restarted group running again (bench/agent_restart_worker.py: rank 1
#     of attempt 0 writes the time and exits 1; every rank of attempt 1
#     writes the time its interpreter reached the first line). One node,
#     2 workers, median of REPS runs. torchrun at its default
#     --monitor-interval (5 s) and at 0.1 s; ddprun with the same Python
#     worker and with a shell worker (its own floor, no interpreter start).
#  2. rendezvous + a trivial worker: N agents (--nnodes=N, so the round
#     closes the moment the last one joins, --nproc-per-node=1, c10d on one
#     endpoint), seconds from launching them all to the last one exiting;
#     ddprun with /bin/true and with a trivial Python script, torchrun
#     (--monitor-interval 0.1) with the same script; each run capped at
#     CAP seconds ("timeout").
#  3. ddprun alone: BIG agents (default 256) with /bin/true.
#
# Ratios are ours / theirs: below 1 is faster. The targets (restart and 8
# agents at most 1/10 of torchrun at --monitor-interval 0.1, 256 agents
# within 3 s) are printed with each result. Environment: REPS (3), SIZES
# ("2 8 32"), BIG (256), CAP (120). Run with `make bench-agent`.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
DDPRUN=$ROOT/build/bin/ddprun
PY=/usr/bin/python3
REPS=${REPS:-3}
SIZES=${SIZES:-2 8 32}
BIG=${BIG:-256}
CAP=${CAP:-120}
# torch 1.13's torchrun on Python 3.11 crashes unless both are 1 or 2.
STD=(--redirects 2 --tee 1)
unset DDPRUN_STORE_TOKEN OMP_NUM_THREADS
for v in $(env | sed -n 's/^\(PET_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
export GLOO_SOCKET_IFNAME=lo
TMP=$(mktemp -d /tmp/ddprun-agent-bench.XXXXXX)
PIDS=()
cleanup() {
    local p
    # timeout(1) passes SIGTERM on to the launcher, which stops its workers.
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2> /dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

[ -x "$DDPRUN" ] || { echo "bench-agent: $DDPRUN is not built (run make)" >&2; exit 1; }
[ -x "$PY" ] || { echo "bench-agent: needs $PY (apt install python3)" >&2; exit 1; }
TORCH=1
"$PY" -c 'import torch.distributed.run' 2> /dev/null || TORCH=0
TORCHRUN=("$PY" -m torch.distributed.run)

# shellcheck source=bench/lib.bash
. "$ROOT/bench/lib.bash"

# ---- 1. restart latency --------------------------------------------------

# restart_once LABEL LAUNCHER... -- ARGS...: one single-node run of the
# restart worker; prints the latency in seconds, "timeout" or "failed".
restart_once() {
    local label=$1 out port rc
    shift
    out=$TMP/restart.$RANDOM$RANDOM
    mkdir -p "$out"
    port=$(free_port)
    BENCH_OUT=$out PYTHON_EXEC=$PY timeout -k 5 "$CAP" "$@" --nnodes 1 --nproc_per_node 2 \
        --max_restarts 1 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$port" \
        --rdzv_id "r$port" "${STD[@]}" --log_dir "$out/logs" "${WORKER[@]}" > "$out/log" 2>&1
    rc=$?
    if [ $rc = 124 ] || [ $rc = 137 ]; then echo timeout; return; fi
    if [ $rc != 0 ] || [ ! -f "$out/fail" ] || [ ! -f "$out/start.0" ] || [ ! -f "$out/start.1" ]; then
        show_failure "$label (exit $rc)" "$out/log"
        echo failed
        return
    fi
    awk 'FNR == 1 && FILENAME ~ /fail$/ {f = $1} FNR == 1 && FILENAME ~ /start/ {if ($1 > s) s = $1}
         END {printf "%.4f\n", s - f}' "$out/fail" "$out"/start.*
}

# restart LABEL LAUNCHER...: the median of REPS runs.
restart() {
    local label=$1
    shift
    for _ in $(seq "$REPS"); do restart_once "$label" "$@"; done | median
}

echo "ddprun agent benchmark: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
[ $TORCH = 1 ] || echo "(torch is not importable by $PY: torchrun columns are skipped)"
echo
echo "1. restart latency: worker failure -> every worker running again (1 node, 2 workers; median of $REPS)"
WORKER=("$ROOT/bench/agent_restart_worker.py")
r_ours=$(restart "ddprun (python worker)" "$DDPRUN")
r_tr5=n/a r_tr01=n/a
if [ $TORCH = 1 ]; then
    r_tr5=$(restart "torchrun (monitor 5 s)" "${TORCHRUN[@]}")
    r_tr01=$(restart "torchrun (monitor 0.1 s)" "${TORCHRUN[@]}" --monitor_interval 0.1)
fi
WORKER=(--no-python "$ROOT/bench/agent_restart_worker.sh")
r_sh=$(restart "ddprun (shell worker)" "$DDPRUN")
printf '  %-48s %8s s\n' "ddprun, python worker" "$(fmt "$r_ours")" \
    "torchrun, python worker, --monitor-interval 5" "$(fmt "$r_tr5")" \
    "torchrun, python worker, --monitor-interval 0.1" "$(fmt "$r_tr01")" \
    "ddprun, shell worker (our floor)" "$(fmt "$r_sh")"
printf '  ratio ddprun/torchrun: %s at monitor 5 s, %s at monitor 0.1 s (target <= 0.1 at 0.1 s)\n' \
    "$(ratio "$r_ours" "$r_tr5")" "$(ratio "$r_ours" "$r_tr01")"

# ---- 2. rendezvous + trivial worker ----------------------------------------

echo
echo "2. rendezvous + trivial worker: N agents (c10d, --nnodes=N, 1 worker each), launch -> last exit (median of $REPS)"
printf '  %6s %12s %12s %12s %14s %14s\n' agents "ddprun true" "ddprun py" "torchrun py" "ratio true/tr" "ratio py/tr"
for n in $SIZES; do
    a=$(agents ddprun "$n" "$DDPRUN" -- --no-python /bin/true)
    b=$(agents "ddprun (python)" "$n" "$DDPRUN" -- "$ROOT/bench/agent_trivial.py")
    c=n/a
    [ $TORCH = 1 ] && c=$(agents torchrun "$n" "${TORCHRUN[@]}" --monitor_interval 0.1 -- "$ROOT/bench/agent_trivial.py")
    printf '  %6s %12s %12s %12s %14s %14s\n' "$n" "$(fmt "$a")" "$(fmt "$b")" "$(fmt "$c")" \
        "$(ratio "$a" "$c")" "$(ratio "$b" "$c")"
done
echo "  (seconds; torchrun at --monitor-interval 0.1; target at 8 agents: ratio <= 0.1)"

# ---- 3. many agents, ddprun alone ------------------------------------------

echo
echo "3. ddprun alone: $BIG agents, /bin/true (median of $REPS; target <= 3 s)"
echo "  limits: open files $(ulimit -n), processes $(ulimit -u)"
need=$((BIG * 4 + 64))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
    ulimit -n "$need" 2> /dev/null ||
        echo "  warning: the store's agent needs ~$need open files; ulimit -n is $(ulimit -n)"
fi
big=$(agents ddprun "$BIG" "$DDPRUN" -- --no-python /bin/true)
printf '  %d agents: %s s\n' "$BIG" "$(fmt "$big")"
