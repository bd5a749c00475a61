#!/usr/bin/env bash
# The bootstrap benchmark (`make bench-bootstrap`): how long R ranks take to
# get through the store requests of torch 2.x's init_process_group under
# torchrun (handshake, ADD init/, the NCCL unique-id exchange; see the
# comment at the top of bench/bootstrap_sim.c), simulated by
# build/tests/bootstrap-sim on this one machine. Side by side:
#
#  1. ddprun-store reached directly by R ranks, R in RANKS_DIRECT;
#  2. PyTorch's own TCPStore server (the libuv backend in torch 2.x, started
#     by bench/torch_store_server.py with PYTHON_EXEC's torch) with the same
#     R; the ratio column is ours/torch seconds (below 1: ours is faster);
#  3. ddprun through per-node proxies: R/RANKS_PER_NODE processes of
#     `ddprun-store --proxy-to STORE`, one per simulated node, each on a
#     port of its own, the simulator's node n connecting to proxy n; R in
#     RANKS_PROXY, with the CPU seconds each side used meanwhile (the store,
#     the proxies, the simulated ranks: on one machine their sum is the
#     bound, on a cluster only the store's is central). Skipped while
#     ddprun-store has no --proxy-to.
#
# The goal it checks: 100,000 ranks in under 10 s. One server process here
# may hold 20,000 descriptors, so direct runs beyond ~19,000 ranks fail,
# which is what the proxies are for. Every server and proxy is started here
# and stopped (by PID) on exit; their logs stay in a temporary folder.
#
# Environment: RANKS_DIRECT (default "1000 4000 16000"), RANKS_PROXY
# (default "16000 100000"), RANKS_PER_NODE (default 100), PYTHON_EXEC (the
# python whose torch is the peer; default build/torch2-venv/bin/python),
# BOOT_TIMEOUT (seconds per run, default 60), BENCH_ROUNDS (runs per cell,
# the median is shown; default 1), SIM_ARGS (more bootstrap-sim options,
# e.g. "--ranks-per-root 128" for torch's multi-root NCCL init, or
# "--barrier"), STORE_BIN (another ddprun-store binary). Reports; asserts
# nothing about timings (the exit status is 0 unless a run could not be
# started).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STORE=${STORE_BIN:-$ROOT/build/bin/ddprun-store}
SIM=$ROOT/build/tests/bootstrap-sim
PY=${PYTHON_EXEC:-$ROOT/build/torch2-venv/bin/python}
TORCH_SERVER=$ROOT/bench/torch_store_server.py
RANKS_DIRECT=${RANKS_DIRECT:-1000 4000 16000}
RANKS_PROXY=${RANKS_PROXY:-16000 100000}
RANKS_PER_NODE=${RANKS_PER_NODE:-100}
BOOT_TIMEOUT=${BOOT_TIMEOUT:-60}
ROUNDS=${BENCH_ROUNDS:-1}
read -r -a SIM_EXTRA <<< "${SIM_ARGS:-}"
# torch's clients never send ddprun's HELLO.
unset DDPRUN_STORE_TOKEN
TMP=$(mktemp -d /tmp/ddprun-bootstrap-bench.XXXXXX)
PIDS=()
# shellcheck source=bench/lib.bash
source "$ROOT/bench/lib.bash"

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    echo "(logs: $TMP)" >&2
}
trap cleanup EXIT

die() { echo "bootstrap_bench: $*" >&2; exit 1; }

for f in "$STORE" "$SIM"; do [ -x "$f" ] || die "$f is not built (run make)"; done
[ -x "$PY" ] || die "$PY is missing (scripts/torch2-venv makes it; or set PYTHON_EXEC)"
torch_version=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) ||
    die "torch is not importable by $PY"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
FDS=$(ulimit -n)

stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# Peak resident memory of a live process, MiB.
hwm_mib() { awk '/^VmHWM:/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo -; }

# CPU seconds a live process's threads have run so far (the scheduler's
# count, ns).
cpu_s() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.4f", s / 1e9 }'; }
# cpu_of PID...: each one's cpu_s, a line each.
cpu_of() { local p; for p in "$@"; do cpu_s "$p"; echo; done; }


# sim LABEL R ENDPOINTS ARGS...: one bootstrap-sim run; prints its line
# (empty when it printed none) and keeps its stderr in $TMP/LABEL.sim.err.
RUN=0
sim() {
    local label=$1 r=$2 eps=$3 line
    shift 3
    RUN=$((RUN + 1))
    line=$("$SIM" --ranks "$r" --nodes $(((r + RANKS_PER_NODE - 1) / RANKS_PER_NODE)) \
        --endpoints "$eps" --timeout "$BOOT_TIMEOUT" --prefix "run$RUN" \
        ${SIM_EXTRA[@]+"${SIM_EXTRA[@]}"} "$@" 2> "$TMP/$label.sim.err") || true
    echo "$line" > "$TMP/$label.sim.out"
    if [ "$(field failed "$line")" != 0 ]; then
        {
            echo "bootstrap_bench: $label: not every rank finished; bootstrap-sim said:"
            tail -n 6 "$TMP/$label.sim.err" | sed 's/^/    /'
        } >&2
    fi
    echo "$line"
}

# A cell's value: the seconds, or "timeout(ok=N)" when some rank did not
# finish within BOOT_TIMEOUT, or "failed" without a result line.
cell_seconds() {
    local line=$1
    if [ -z "$line" ]; then echo failed
    elif [ "$(field failed "$line")" != 0 ]; then echo "timeout(ok=$(field ok "$line"))"
    else field seconds "$line"; fi
}

# Source addresses: up to ~22,000 ranks every connection comes from
# 127.0.0.1 with a port the simulator picks (10000 + rank, below the
# kernel's ephemeral range); beyond that each node has its own 127/8
# address. The torch server looks up each client's name (getnameinfo), and
# only 127.0.0.1 is in /etc/hosts: other addresses cost it a DNS query each
# (see bench/torch_store_server.py --ipv4-fd).
src_args() {
    if [ "$1" -le 22000 ]; then echo --src-port-base 10000; else echo --src-per-node; fi
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
mem=$(awk '/^MemTotal:/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)
libuv=$("$PY" -c 'import datetime, torch.distributed as d
s = d.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=5), wait_for_workers=False)
print(getattr(s, "libuvBackend", "n/a"))' 2>/dev/null || echo unknown)
echo "# Bootstrap benchmark: init_process_group's store traffic, simulated ranks"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "- machine: $(nproc) CPUs ($cpu), $mem GiB RAM, Linux $(uname -r), $FDS descriptors per process"
echo "- command: \`make bench-bootstrap\` (bench/bootstrap_bench.sh; RANKS_DIRECT=\"$RANKS_DIRECT\"" \
     "RANKS_PROXY=\"$RANKS_PROXY\" RANKS_PER_NODE=$RANKS_PER_NODE BOOT_TIMEOUT=$BOOT_TIMEOUT" \
     "BENCH_ROUNDS=$ROUNDS SIM_ARGS=\"${SIM_ARGS:-}\")"
echo "- peer: torch $torch_version ($PY), TCPStore server with libuv backend: $libuv"
echo "- load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- per rank: connect, VALIDATE+PING, ADD init/, then the NCCL unique id (rank 0 SETs it once" \
     "every rank has started connecting; every rank WAITs, WAITs, MULTI_GETs it: torch 2.15's" \
     "default nccl engine); 'seconds' is from the start until the last rank is done"
echo

# --- 1 and 2: one server reached directly --------------------------------
echo "## One server, reached directly"
echo
echo "Done p99, connect retries (refused or reset connects, retried after a backoff) and the"
echo "server's peak RSS are from the last round."
echo
echo "| ranks | nodes | ours s | torch s | ours/torch | done p99 ms ours / torch | connect retries ours / torch | peak RSS MiB ours / torch |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
declare -A DIRECT_OURS=() DIRECT_TORCH=()
for r in $RANKS_DIRECT; do
    nodes=$(((r + RANKS_PER_NODE - 1) / RANKS_PER_NODE))
    read -r -a src <<< "$(src_args "$r")"
    : > "$TMP/ours.vals"
    : > "$TMP/torch.vals"
    ours_p99=- torch_p99=- ours_rss=- torch_rss=- ours_rt=- torch_rt=-
    for round in $(seq "$ROUNDS"); do
        for who in ours torch; do
            # The order flips every round, so that drift favours neither.
            if [ $((round % 2)) = 0 ]; then who=$([ "$who" = ours ] && echo torch || echo ours); fi
            if [ "$who" = ours ]; then
                start_server "ours.$r.$round" "$STORE" --host 127.0.0.1 --port 0
            else
                start_server "torch.$r.$round" "$PY" "$TORCH_SERVER" --host 127.0.0.1 --port 0 --ipv4-fd
            fi
            line=$(sim "$who.$r.$round" "$r" "127.0.0.1:$SERVER_PORT" "${src[@]}")
            rss=$(hwm_mib "$SERVER_PID")
            stop_pid "$SERVER_PID"
            cell_seconds "$line" >> "$TMP/$who.vals"
            p99=$(field done_p99_ms "$line")
            rt=$(field connect_retries "$line")
            if [ "$who" = ours ]; then
                ours_p99=${p99:--} ours_rss=$rss ours_rt=${rt:--}
            else
                torch_p99=${p99:--} torch_rss=$rss torch_rt=${rt:--}
            fi
        done
    done
    o=$(median < "$TMP/ours.vals")
    t=$(median < "$TMP/torch.vals")
    DIRECT_OURS[$r]=$o
    DIRECT_TORCH[$r]=$t
    echo "| $r | $nodes | $o | $t | $(ratio "$o" "$t") | $ours_p99 / $torch_p99 | $ours_rt / $torch_rt |" \
         "$ours_rss / $torch_rss |"
done
echo

# --- 3: per-node proxies --------------------------------------------------
echo "## ddprun through per-node proxies (one \`ddprun-store --proxy-to\` per node)"
echo
goal="not measured"
if ! "$STORE" --help 2>&1 | grep -q -- '--proxy-to'; then
    echo "Skipped: ddprun-store has no --proxy-to yet."
else
    echo "CPU seconds (user + system, the last round): the job's store; every proxy together and"
    echo "the busiest one; every simulated rank together. On a cluster only the store's are"
    echo "central: each proxy and its node's ranks have that node's cores."
    echo
    echo "| ranks | nodes = proxies | ours via proxies s | ours direct s | torch direct s | ours via proxies / torch direct | done p99 ms | store peak RSS MiB | CPU s: store / proxies (busiest) / ranks |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for r in $RANKS_PROXY; do
        m=$(((r + RANKS_PER_NODE - 1) / RANKS_PER_NODE))
        : > "$TMP/proxy.vals"
        p99=- rss=- cpu=-
        for round in $(seq "$ROUNDS"); do
            start_server "store.proxied.$r.$round" "$STORE" --host 127.0.0.1 --port 0
            store_pid=$SERVER_PID store_port=$SERVER_PORT
            # Each simulated node's agent would run its proxy; here they all
            # start first, then the ranks come.
            ppids=()
            for i in $(seq 0 $((m - 1))); do
                "$STORE" --host 127.0.0.1 --port 0 --proxy-to "127.0.0.1:$store_port" \
                    2> "$TMP/proxy.$r.$round.$i.err" &
                ppids+=($!)
                PIDS+=($!)
            done
            eps=()
            for i in $(seq 0 $((m - 1))); do
                port=
                for _ in $(seq 600); do
                    port=$(port_of "$TMP/proxy.$r.$round.$i.err")
                    [ -n "$port" ] && break
                    kill -0 "${ppids[$i]}" 2>/dev/null || break
                    sleep 0.1
                done
                if [ -z "$port" ]; then
                    tail -n 5 "$TMP/proxy.$r.$round.$i.err" >&2
                    die "proxy $i did not report its port"
                fi
                eps+=("127.0.0.1:$port")
            done
            # (the CPU they used starting is not the bootstrap's)
            cpu_of "$store_pid" "${ppids[@]}" > "$TMP/cpu.before"
            line=$(sim "proxied.$r.$round" "$r" "$(IFS=,; echo "${eps[*]}")" --src-per-node)
            rss=$(hwm_mib "$store_pid")
            cpu_of "$store_pid" "${ppids[@]}" > "$TMP/cpu.after"
            cpu=$(paste "$TMP/cpu.before" "$TMP/cpu.after" | awk -v ranks="$(field cpu_s "$line")" '
                NR == 1 { store = $2 - $1; next }
                { d = $2 - $1; s += d; if (d > m) m = d }
                END { printf "%.2f / %.2f (%.3f) / %s", store, s, m, ranks }')
            for p in "${ppids[@]}"; do kill "$p" 2>/dev/null || true; done
            for p in "${ppids[@]}"; do wait "$p" 2>/dev/null || true; done
            stop_pid "$store_pid"
            cell_seconds "$line" >> "$TMP/proxy.vals"
            p99=$(field done_p99_ms "$line")
            p99=${p99:--}
        done
        v=$(median < "$TMP/proxy.vals")
        # The direct figures where the first table ran this R.
        od=${DIRECT_OURS[$r]:--} td=${DIRECT_TORCH[$r]:--}
        echo "| $r | $m | $v | $od | $td | $(ratio "$v" "$td") | $p99 | $rss | $cpu |"
        if [ "$r" -ge 100000 ]; then
            if awk -v s="$v" 'BEGIN { exit !(s ~ /^[0-9.]+$/ && s < 10) }'; then goal="met ($v s)"
            else goal="NOT met ($v)"; fi
        fi
    done
fi
echo
echo "- goal: 100,000 ranks bootstrapped in under 10 s: $goal"
