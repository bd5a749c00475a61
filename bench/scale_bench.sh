#!/usr/bin/env bash
# The scale test bed (make bench-scale): N agents on this one machine, each
# a node of its own to the rendezvous (--local-addr nodeI), one worker each
# (bench/scale_worker.sh: it notes when it started, then sleeps), the job's
# store a ddprun-store of its own (c10d: its --stats-every lines count the
# requests) or one etcd member (etcd-v3). For each backend and N, in one
# job (--nnodes N-2:N, so that it survives two losses):
#   form     from the last agent's start to every worker running
#   worker   from one worker's SIGKILL to every node's next group running
#   agent    from one agent's SIGKILL to the survivors' group running
#   silent   from one agent's SIGSTOP (it says nothing and its connections
#            stay open, as when its host is cut off) to the survivors' group
#            running: the heartbeat's detection, then a re-forming
#   noticed  from that SIGSTOP to the first survivor's "a node left" (its
#            agent's log): the heartbeat's detection alone
#   store    its CPU seconds over the whole job, its CPU share and requests
#            per second at rest (REST seconds, the workers running), its
#            peak memory
#   agent    each agent's memory: its proportional share (PSS: the pages it
#            shares with the others split among them), the mean
#   false    nodes whose group restarted during the rest, when nothing
#            failed: false losses (a heartbeat that lapsed under load)
# Then torchrun side by side (form, worker, agent, silent) at TORCH_SIZES,
# with PYTHON_EXEC's torch (Debian's 1.13 by default; a torch 2.x venv's
# python for today's). Each phase is capped at CAP seconds ("timeout").
# Environment: SIZES ("8 64 256"; add 1000 for the issue's largest),
# BACKENDS ("c10d etcd-v3"), TORCH_SIZES ("8"; "" leaves torchrun out),
# REST (5), CAP (120), HEARTBEAT (our agents' keep_alive_interval, s;
# 2 by default), LOAD (busy loops, one per CPU by default 0, that run
# through the rest: a CPU-saturated machine; make bench-soak), STORE_NICE (the
# store's or etcd's niceness, 0; -10 stands for a host of its own), KEEP (a directory: each job's files, its agents'
# logs and its workers' starts, are copied there), STORE_PROXY (on or off:
# our agents run with --store-proxy so, and every worker first does what
# init_process_group does in the workers' store: an ADD, the last rank's SET,
# a WAIT; through its agent's proxy when on). Exits 1 when a phase of ours failed or timed out,
# so that tests/integration/scale_small.sh can run a small one in make
# check.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
DDPRUN=$ROOT/build/bin/ddprun
STORE=$ROOT/build/bin/ddprun-store
WORKER=$ROOT/bench/scale_worker.sh
PY=${PYTHON_EXEC:-/usr/bin/python3}
SIZES=${SIZES-8 64 256}
BACKENDS=${BACKENDS-c10d etcd-v3}
TORCH_SIZES=${TORCH_SIZES-8}
REST=${REST:-5}
CAP=${CAP:-120}
unset DDPRUN_STORE_TOKEN OMP_NUM_THREADS
for v in $(env | sed -n 's/^\(PET_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
TMP=$(mktemp -d /tmp/ddprun-scale-bench.XXXXXX)
PIDS=()
LOAD=${LOAD:-0}
STORE_NICE=${STORE_NICE:-0}
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -CONT "$p" 2> /dev/null; kill -KILL "$p" 2> /dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
# shellcheck source=bench/lib.bash
. "$ROOT/bench/lib.bash"

[ -x "$DDPRUN" ] && [ -x "$STORE" ] || { echo "bench-scale: build/bin is not built (run make)" >&2; exit 1; }
# Every agent holds a few connections to the store, and the store one per connection.
ulimit -n "$(ulimit -Hn)" 2> /dev/null
ulimit -u unlimited 2> /dev/null

now_s() { date +%s.%N; }
# peak_mb PID: its peak resident memory, MB.
peak_mb() { awk '/^VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$1/status" 2> /dev/null; }
# cpu_sum PID...: their CPU seconds so far (user + system), summed.
cpu_sum() {
    local p hz
    hz=$(getconf CLK_TCK)
    for p in "$@"; do cat "/proc/$p/stat" 2> /dev/null; done | awk -v hz="$hz" '{s += $14 + $15} END {printf "%.2f", s / hz}'
}
# pss_mb PID...: their mean proportional memory, MB.
# etcd_sum ENDPOINT PATTERN: the sum of etcd's counters (its /metrics)
# whose lines start with PATTERN; "" without curl or an answer.
etcd_sum() {
    command -v curl > /dev/null || return 0
    curl -s --max-time 5 "http://$1/metrics" |
        awk -v p="$2" 'index($0, p) == 1 {s += $NF; n++} END {if (n) printf "%.0f", s}'
}
ETCD_RPCS='grpc_server_started_total'
ETCD_WATCH_SENT='grpc_server_msg_sent_total{grpc_method="Watch"'

pss_mb() {
    local p
    for p in "$@"; do awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2> /dev/null; done |
        awk '{s += $1; n++} END {if (n) printf "%.1f", s / n / 1024; else print "-"}'
}

# files NODE...: their files (every node's exists, empty, from the job's start).
files() {
    local n
    for n in "$@"; do printf '%s\n' "$OUT/n$n"; done
}
# since K T0 NODE...: waits (up to CAP) until every NODE has its K-th
# start, then prints the seconds from T0 to the last of them, or "timeout".
since() {
    local k=$1 t0=$2 give_up f=()
    shift 2
    mapfile -t f < <(files "$@")
    give_up=$(($(date +%s) + CAP))
    until [ "$(awk -v k="$k" 'FNR == k {c++} END {print c + 0}' "${f[@]}")" -ge "$#" ]; do
        [ "$(date +%s)" -lt "$give_up" ] || { echo timeout; return; }
        sleep 0.05
    done
    awk -v k="$k" -v t0="$t0" 'FNR == k {t = $1 / 1e9; if (t > m) m = t} END {printf "%.3f\n", m - t0}' "${f[@]}"
}
# noticed T0 NODE...: the seconds from T0 (since the epoch) to the first
# "a node left" in those nodes' agents' logs after it (their [HH:MM:SS.mmm]
# times, this machine's clock and zone), or "-".
noticed() {
    local t0=$1 day
    shift
    day=$(date -d "@$t0" +%H:%M:%S.%N | awk -F: '{print $1 * 3600 + $2 * 60 + $3}')
    for n in "$@"; do grep -h "a node left" "$OUT/agent.$n" 2> /dev/null; done |
        awk -v t="$day" '{split(substr($1, 2, 12), p, ":"); s = p[1] * 3600 + p[2] * 60 + p[3];
                          if (s >= t && (m == "" || s < m)) m = s}
                         END {if (m == "") print "-"; else printf "%.3f\n", m - t}'
}
# worker_pid NODE: the pid of NODE's newest worker.
worker_pid() { tail -n 1 "$OUT/n$1" | awk '{print $2}'; }

# job LAUNCHER N BACKEND ENDPOINT: starts N agents of one job; AGENT[i] their pids.
job() {
    local launcher=$1 n=$2 backend=$3 endpoint=$4 i
    AGENT=()
    for ((i = 0; i < n; i++)); do : > "$OUT/n$i"; done
    for ((i = 0; i < n; i++)); do
        if [ "$launcher" = ddprun ]; then
            SCALE_OUT=$OUT SCALE_NODE=$i SCALE_STORE=${STORE_PROXY:-} PATH=$ROOT/build/bin:$PATH \
                "$DDPRUN" --nnodes "$((n - 2)):$n" --nproc-per-node 1 \
                ${STORE_PROXY:+--store-proxy "$STORE_PROXY"} \
                --max-restarts 10 --rdzv-backend "$backend" --rdzv-endpoint "$endpoint" \
                --rdzv-id "scale$n" --local-addr "node$i" \
                --rdzv-conf "join_timeout=$CAP${HEARTBEAT:+,keep_alive_interval=$HEARTBEAT}" \
                --log-dir "$OUT/logs.$i" --no-python "$WORKER" > "$OUT/agent.$i" 2>&1 &
        else
            SCALE_OUT=$OUT SCALE_NODE=$i "$PY" -m torch.distributed.run --nnodes "$((n - 2)):$n" \
                --nproc_per_node 1 --max_restarts 10 --rdzv_backend "$backend" \
                --rdzv_endpoint "$endpoint" --rdzv_id "scale$n" --rdzv_conf "join_timeout=$CAP" \
                --redirects 2 --tee 1 --log_dir "$OUT/logs.$i" --no_python "$WORKER" \
                > "$OUT/agent.$i" 2>&1 &
        fi
        AGENT[i]=$!
        PIDS+=($!)
        disown $! # (no "Killed" line from the shell for the ones killed on purpose)
    done
}

# stop_job: SIGTERM to every agent (the stopped one gets SIGCONT and SIGKILL
# first), and a wait for them.
stop_job() {
    local p
    kill -CONT "${AGENT[@]}" 2> /dev/null
    [ -n "${STOPPED:-}" ] && kill -KILL "$STOPPED" 2> /dev/null
    kill -TERM "${AGENT[@]}" 2> /dev/null
    for p in "${AGENT[@]}"; do
        timeout 30 tail --pid="$p" -f /dev/null 2> /dev/null || kill -KILL "$p" 2> /dev/null
    done
}

FAILED=0
# run_job LAUNCHER N BACKEND ENDPOINT STORE_PID: the phases; prints a row.
run_job() {
    local launcher=$1 n=$2 backend=$3 endpoint=$4 spid=$5 all=() live=() i t0
    local form worker agent silent notice="-" cpu0 cpu1 rest_cpu="-" rps="-" mem="-" amem="-" total="-" acpu="-"
    local false_losses="-" burners=()
    OUT=$TMP/$launcher.$backend.$n
    mkdir -p "$OUT"
    STOPPED=
    for ((i = 0; i < n; i++)); do all+=("$i"); done
    [ -n "$spid" ] && cpu0=$(cpu_sum "$spid")
    local watch0="" rpc0=""
    if [ "$backend" = etcd-v3 ] && [ -n "$spid" ]; then
        watch0=$(etcd_sum "$endpoint" "$ETCD_WATCH_SENT")
        rpc0=$(etcd_sum "$endpoint" "$ETCD_RPCS")
    fi
    job "$launcher" "$n" "$backend" "$endpoint"
    t0=$(now_s)
    form=$(since 1 "$t0" "${all[@]}")
    if [ "$form" != timeout ]; then
        # at rest (LOAD busy loops beside: the machine saturated)
        local a0 a1
        for ((i = 0; i < LOAD; i++)); do
            bash -c 'while :; do :; done' &
            burners+=($!)
            PIDS+=($!)
            disown $!
        done
        a0=$(cpu_sum "${AGENT[@]}")
        if [ -n "$spid" ]; then
            local c0 c1 lines=0 r0="" r1=""
            [ "$backend" = etcd-v3 ] || lines=$(grep -c 'stats:' "$TMP/store.err")
            [ "$backend" = etcd-v3 ] && r0=$(etcd_sum "$endpoint" "$ETCD_RPCS")
            c0=$(cpu_sum "$spid")
            sleep "$REST"
            c1=$(cpu_sum "$spid")
            [ "$backend" = etcd-v3 ] && r1=$(etcd_sum "$endpoint" "$ETCD_RPCS")
            rest_cpu=$(awk -v a="$c0" -v b="$c1" -v t="$REST" 'BEGIN {printf "%.0f%%", 100 * (b - a) / t}')
            if [ "$backend" = etcd-v3 ]; then # requests (each a gRPC call or stream) a second
                [ -n "$r0" ] && [ -n "$r1" ] &&
                    rps=$(awk -v a="$r0" -v b="$r1" -v t="$REST" 'BEGIN {printf "%.0f", (b - a) / t}')
            else # the mean rate of the stats lines printed during the rest ("(123/s)")
                rps=$(grep 'stats:' "$TMP/store.err" | tail -n +"$((lines + 1))" |
                      sed -n 's/.*requests (\([0-9]*\)\/s).*/\1/p' |
                      awk '{s += $1; n++} END {if (n) printf "%.0f", s / n; else print "-"}')
            fi
        else
            sleep "$REST"
        fi
        a1=$(cpu_sum "${AGENT[@]}")
        [ "${#burners[@]}" -gt 0 ] && kill -KILL "${burners[@]}" 2> /dev/null
        # nothing failed: a node whose group started again was taken for lost
        mapfile -t f < <(files "${all[@]}")
        false_losses=$(awk 'FNR == 2 {c++} END {print c + 0}' "${f[@]}")
        acpu=$(awk -v a="$a0" -v b="$a1" -v t="$REST" -v n="$n" 'BEGIN {printf "%.2f%%", 100 * (b - a) / t / n}')
        amem=$(pss_mb "${AGENT[@]}")
        # a worker's SIGKILL (a node in the middle)
        kill -KILL "$(worker_pid $((n / 2)))"
        t0=$(now_s)
        worker=$(since 2 "$t0" "${all[@]}")
        # an agent's SIGKILL
        local gone=$((n / 3)) frozen=$((2 * n / 3))
        [ "$gone" = "$((n / 2))" ] && gone=$((gone - 1))
        kill -KILL "${AGENT[$gone]}"
        t0=$(now_s)
        live=()
        for i in "${all[@]}"; do [ "$i" = "$gone" ] || live+=("$i"); done
        agent=$(since 3 "$t0" "${live[@]}")
        # an agent stopped: silent
        kill -STOP "${AGENT[$frozen]}"
        STOPPED=${AGENT[$frozen]}
        t0=$(now_s)
        live=()
        for i in "${all[@]}"; do [ "$i" = "$gone" ] || [ "$i" = "$frozen" ] || live+=("$i"); done
        silent=$(since 4 "$t0" "${live[@]}")
        notice=$(noticed "$t0" "${live[@]}")
    else
        worker=- agent=- silent=-
    fi
    local watch1="" rpc1=""
    if [ -n "$watch0" ]; then
        watch1=$(etcd_sum "$endpoint" "$ETCD_WATCH_SENT")
        rpc1=$(etcd_sum "$endpoint" "$ETCD_RPCS")
    fi
    stop_job
    if [ -n "$spid" ]; then
        cpu1=$(cpu_sum "$spid")
        total=$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN {printf "%.2f", b - a}')
        mem=$(peak_mb "$spid")
    fi
    for v in "$form" "$worker" "$agent" "$silent"; do
        [[ "$v" =~ ^[0-9.]+$ ]] || { [ "$launcher" = ddprun ] && FAILED=1; }
    done
    [ "$false_losses" = 0 ] || [ "$false_losses" = - ] || { [ "$launcher" = ddprun ] && FAILED=1; }
    if [ "$form" = timeout ] && [ "$launcher" = ddprun ]; then
        echo "bench-scale: $n agents on $backend did not form; the first agent's log ends:" >&2
        tail -n 8 "$OUT/agent.0" | sed 's/^/    /' >&2
    fi
    printf '  %-9s %-8s %6s %8s %8s %8s %8s %8s %10s %8s %8s %9s %10s %9s %6s\n' "$launcher" "$backend" "$n" \
        "$(fmt "$form")" "$(fmt "$worker")" "$(fmt "$agent")" "$(fmt "$silent")" "$notice" "$total" \
        "$rest_cpu" "$rps" "$mem" "$acpu" "$amem" "$false_losses"
    [ -n "$watch1" ] && [ -n "$rpc1" ] &&
        echo "    (etcd over the job, from its counters: $((rpc1 - rpc0)) requests, $((watch1 - watch0)) watch messages sent)"
    if [ -n "${KEEP:-}" ]; then
        cp -r "$OUT" "$KEEP/"
        [ -z "$spid" ] || cp "$TMP/store.err" "$KEEP/store.$backend.$n.err" 2> /dev/null || true
        [ "$backend" != etcd-v3 ] || cp "$TMP/etcd.log" "$KEEP/etcd.$n.log" 2> /dev/null || true
    fi
    rm -rf "$OUT"
}

# start_store BACKEND: the job's store for our agents; sets ENDPOINT, SPID.
start_store() {
    local port pport
    port=$(free_port)
    if [ "$1" = c10d ]; then
        nice -n "$STORE_NICE" "$STORE" --host 127.0.0.1 --port "$port" --stats-every 1 -q 2> "$TMP/store.err" &
        SPID=$!
        PIDS+=($!)
        for _ in $(seq 100); do grep -q "listening on" "$TMP/store.err" 2> /dev/null && break; sleep 0.05; done
    else
        pport=$(free_port)
        nice -n "$STORE_NICE" etcd --name s --data-dir "$TMP/etcd.$port" --listen-client-urls "http://127.0.0.1:$port" \
            --advertise-client-urls "http://127.0.0.1:$port" \
            --listen-peer-urls "http://127.0.0.1:$pport" \
            --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
            --initial-cluster "s=http://127.0.0.1:$pport" > "$TMP/etcd.log" 2>&1 &
        SPID=$!
        PIDS+=($!)
        for _ in $(seq 100); do
            ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$port" endpoint health > /dev/null 2>&1 && break
            sleep 0.1
        done
    fi
    ENDPOINT=127.0.0.1:$port
}
stop_store() { kill -TERM "$SPID" 2> /dev/null; wait "$SPID" 2> /dev/null; }

echo "ddprun scale benchmark: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), $(free -g | awk '/^Mem:/ {print $2}') GB, $(date -u '+%Y-%m-%d %H:%M UTC'), open files $(ulimit -n)"
echo "One job per row, --nnodes N-2:N, one worker each; seconds, except where said."
printf '  %-9s %-8s %6s %8s %8s %8s %8s %8s %10s %8s %8s %9s %10s %9s %6s\n' launcher backend agents form worker agent silent noticed \
    "store cpu" "at rest" "req/s" "store MB" "agent cpu" "agent MB" false
for backend in $BACKENDS; do
    if [ "$backend" = etcd-v3 ] && ! command -v etcd > /dev/null; then
        echo "  (etcd-v3 skipped: etcd is not installed; apt install etcd-server)"
        continue
    fi
    for n in $SIZES; do
        start_store "$backend"
        run_job ddprun "$n" "$backend" "$ENDPOINT" "$SPID"
        stop_store
    done
done
if [ -n "$TORCH_SIZES" ]; then
    if ! "$PY" -c 'import torch.distributed.run' 2> /dev/null; then
        echo "  (torchrun skipped: $PY cannot import torch.distributed.run)"
    else
        tv=$("$PY" -c 'import torch; print(torch.__version__)')
        echo "  torchrun: torch $tv ($PY), c10d, its own store (hosted by its first agent)"
        for n in $TORCH_SIZES; do run_job torchrun "$n" c10d "127.0.0.1:$(free_port)" ""; done
    fi
fi
echo "  form: last agent started -> every worker running; worker: a worker's SIGKILL ->"
echo "  every node's next group; agent: an agent's SIGKILL -> the survivors'; silent: an"
echo "  agent's SIGSTOP -> the survivors' (the heartbeat); noticed: that SIGSTOP -> the first"
echo "  survivor's \"a node left\" (the heartbeat alone); store cpu: CPU seconds over the"
echo "  job; at rest: its CPU share and requests/s for ${REST} s with the workers running;"
echo "  MB: the store's peak resident memory; agent cpu: each agent's mean CPU share at"
echo "  rest; agent MB: each agent's mean proportional memory (PSS); false: nodes whose"
echo "  group restarted during the rest, nothing having failed (false losses)."
[ "$LOAD" -gt 0 ] && echo "  $LOAD busy loops ran through the rest (a saturated machine)."
exit $FAILED
