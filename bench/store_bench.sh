#!/usr/bin/env bash
# The store benchmark (`make bench-store`): ddprun-store against PyTorch's
# own TCPStore server, side by side in one run on one machine, because
# these machines are shared and noisy and only the ratio means anything.
#
# 1. Throughput and latency: build/tests/store-load runs closed-loop round
#    trips of SET(+CHECK), GET and ADD with 1, 16 and 64 connections against
#    each server. The client is identical for both (protocol generation 1,
#    torch 1.13's, without our extension), so only the server differs.
# 2. Memory: ddprun-store holding 100,000 keys of 100 bytes and 2000 idle
#    connections; its resident set must stay under 64 MiB. torch's server
#    under the same load is shown for reference (its figure includes the
#    Python interpreter and libtorch).
#
# Prints a Markdown table for docs/results.md. It reports; it asserts
# nothing about timings (the exit status is 0 unless a run failed).
# Environment: BENCH_SECONDS (default 3) per measurement, BENCH_ROUNDS
# (default 3) measurements per server and cell, of which the median is shown.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=${BENCH_SECONDS:-3}
ROUNDS=${BENCH_ROUNDS:-3}
STORE=$ROOT/build/bin/ddprun-store
LOAD=$ROOT/build/tests/store-load
PY=/usr/bin/python3
TORCH_SERVER=$ROOT/bench/torch_store_server.py
# A token would make ddprun-store demand a handshake the benchmark's
# generation-1 client does not send.
unset DDPRUN_STORE_TOKEN
TMP=$(mktemp -d /tmp/ddprun-bench.XXXXXX)
PIDS=()

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

die() { echo "store_bench: $*" >&2; exit 1; }
# shellcheck source=bench/lib.bash
. "$ROOT/bench/lib.bash"

for f in "$STORE" "$LOAD"; do [ -x "$f" ] || die "$f is not built (run make)"; done
"$PY" -c 'import torch.distributed' 2>/dev/null ||
    die "torch is not importable by $PY (apt install python3-torch); it is the peer compared with"
# 2000 connections on each side need more descriptors than the usual 1024.
ulimit -n "$(ulimit -Hn)" 2>/dev/null

stop_server() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }


rss_mib() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
mem=$(awk '/^MemTotal:/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)
torch_version=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)
echo "# Store benchmark: ddprun-store vs torch.distributed.TCPStore (torch $torch_version)"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "- machine: $(nproc) CPUs ($cpu), $mem GiB RAM, Linux $(uname -r)"
echo "- command: \`make bench-store\` (bench/store_bench.sh, BENCH_SECONDS=$SECS BENCH_ROUNDS=$ROUNDS)"
echo "- load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- client: build/tests/store-load, one thread and connection per 'conns'," \
     "protocol generation 1 (torch 1.13's) without our extension against both servers;" \
     "'set' is SET+CHECK (one round trip), 'get' is WAIT+GET (two, as torch's client does)," \
     "'add' is ADD (one)"
echo

start_server ours "$STORE" --host 127.0.0.1 --port 0
ours_pid=$SERVER_PID ours_port=$SERVER_PORT
start_server torch "$PY" "$TORCH_SERVER" --host 127.0.0.1 --port 0
torch_pid=$SERVER_PID torch_port=$SERVER_PORT

# cpu_ns PID: CPU time the process has used, summed over its threads (torch
# serves from a thread of its own), in nanoseconds.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'; }

# measure NAME PORT PID OP CONNS: one store-load bench run; appends
# "ops_per_s p50 p99 server_cpu_us_per_op" to $TMP/NAME.cell.
measure() {
    local name=$1 port=$2 pid=$3 op=$4 conns=$5 c0 c1 line
    c0=$(cpu_ns "$pid")
    line=$("$LOAD" bench --host 127.0.0.1 --port "$port" --op "$op" --conns "$conns" \
        --seconds "$SECS" --gen v1 --no-ext 2> "$TMP/load.err") || {
        cat "$TMP/load.err" >&2
        return 1
    }
    c1=$(cpu_ns "$pid")
    echo "$(field ops_per_s "$line") $(field p50_us "$line") $(field p99_us "$line")" \
         "$(awk -v a="$c0" -v b="$c1" -v n="$(field ops "$line")" \
             'BEGIN { printf "%.1f", (n > 0 ? (b - a) / 1000 / n : 0) }')" >> "$TMP/$name.cell"
}

# median NAME COLUMN: the median of one column of $TMP/NAME.cell.
median() {
    awk -v c="$2" '{ print $c }' "$TMP/$1.cell" | sort -g |
        awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "Each cell is the median of $ROUNDS runs of $SECS s per server; the servers take turns"
echo "(the order flips every run) so that drift on a shared machine favours neither."
echo "'server CPU' is the server process's CPU time per operation: on a machine where"
echo "the client threads compete with the server for the same cores, it shows the"
echo "server's own cost even where throughput is bound by the client."
echo
echo "| op | conns | ours ops/s | torch ops/s | ratio | ours p50 / p99 µs | torch p50 / p99 µs | server CPU µs/op ours / torch |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
failed=0 ratio_ok=1 p99_ok=1 turn=0
for op in set get add; do
    for conns in 1 16 64; do
        rm -f "$TMP/ours.cell" "$TMP/torch.cell"
        for _ in $(seq "$ROUNDS"); do
            if [ $((turn++ % 2)) -eq 0 ]; then
                measure ours "$ours_port" "$ours_pid" "$op" "$conns" || failed=1
                measure torch "$torch_port" "$torch_pid" "$op" "$conns" || failed=1
            else
                measure torch "$torch_port" "$torch_pid" "$op" "$conns" || failed=1
                measure ours "$ours_port" "$ours_pid" "$op" "$conns" || failed=1
            fi
        done
        if [ ! -s "$TMP/ours.cell" ] || [ ! -s "$TMP/torch.cell" ]; then
            echo "| $op | $conns | failed | failed | - | - | - | - |"
            failed=1
            continue
        fi
        oo=$(median ours 1) o50=$(median ours 2) o99=$(median ours 3) ocpu=$(median ours 4)
        to=$(median torch 1) t50=$(median torch 2) t99=$(median torch 3) tcpu=$(median torch 4)
        ratio=$(awk -v a="$oo" -v b="$to" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
        echo "| $op | $conns | $oo | $to | ${ratio}x | $o50 / $o99 | $t50 / $t99 | $ocpu / $tcpu |"
        if [ "$conns" = 64 ] && awk -v r="$ratio" 'BEGIN { exit !(r < 2) }'; then ratio_ok=0; fi
        if awk -v a="$o99" -v b="$t99" 'BEGIN { exit !(a >= b) }'; then p99_ok=0; fi
    done
done
echo
verdict() { [ "$1" = 1 ] && echo met || echo "NOT met"; }
echo "- target: ours >= 2x torch ops/s at 64 connections: $(verdict $ratio_ok)"
echo "- target: ours p99 lower than torch's at every connection count: $(verdict $p99_ok)"
stop_server "$ours_pid"
stop_server "$torch_pid"

# idle_rss NAME CMD... -- LOAD_ARGS...: starts a fresh server, loads it with
# store-load idle and sets IDLE_BASE and IDLE_LOADED (resident MiB at start
# and under the load). Runs in this shell, not a subshell, so that the
# processes it starts are in PIDS for the exit trap.
idle_rss() {
    local name=$1
    shift
    local cmd=()
    while [ "$1" != -- ]; do cmd+=("$1"); shift; done
    shift
    start_server "$name" "${cmd[@]}"
    local spid=$SERVER_PID
    sleep 0.5
    IDLE_BASE=$(rss_mib "$spid")
    "$LOAD" idle --host 127.0.0.1 --port "$SERVER_PORT" --conns 2000 --keys 100000 \
        --value-bytes 100 --hold-seconds 30 "$@" > "$TMP/$name.idle" 2> "$TMP/$name.idle.err" &
    local lpid=$! rc=0
    PIDS+=("$lpid")
    for _ in $(seq 600); do
        grep -q '^ready' "$TMP/$name.idle" && break
        kill -0 "$lpid" 2>/dev/null || break
        sleep 0.1
    done
    if grep -q '^ready' "$TMP/$name.idle"; then
        sleep 1 # let the server settle after the last connection
        IDLE_LOADED=$(rss_mib "$spid")
    else
        cat "$TMP/$name.idle.err" >&2
        rc=1
    fi
    stop_server "$lpid"
    stop_server "$spid"
    return $rc
}

echo
echo "Memory: 100,000 keys of 100 bytes and 2000 idle connections (VmRSS)"
echo
if idle_rss ours-idle "$STORE" --host 127.0.0.1 --port 0 --; then
    pass=$(awk -v r="$IDLE_LOADED" 'BEGIN { print (r < 64) ? "PASS" : "FAIL" }')
    echo "- ddprun-store: $IDLE_LOADED MiB loaded ($IDLE_BASE MiB at start): $pass (limit 64 MiB)"
else
    echo "- ddprun-store: the idle load failed"
    failed=1
fi
if idle_rss torch-idle "$PY" "$TORCH_SERVER" --host 127.0.0.1 --port 0 -- --gen v1 --no-ext; then
    echo "- torch TCPStore (reference; includes Python and libtorch):" \
         "$IDLE_LOADED MiB loaded ($IDLE_BASE MiB at start)"
else
    echo "- torch TCPStore (reference): the idle load failed"
fi
exit $failed
