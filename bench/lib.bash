# Shell helpers the benchmarks share (bench/agent_bench.sh,
# bench/rdzv_etcd_bench.sh, bench/store_bench.sh, bench/bootstrap_bench.sh):
# medians, ratios, servers started and their ports read, and N agents
# started together and timed. Sourced after the caller set PY, TMP, CAP, REPS, STD and the
# PIDS array (its cleanup stops what is left).

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
now_ns() { date +%s%N; }
# median of the numbers on stdin, or the first word that is not a number
# ("timeout", "failed") if any run gave one.
median() {
    local v
    v=$(cat)
    if grep -qv '^[0-9.]*$' <<< "$v"; then grep -v '^[0-9.]*$' <<< "$v" | head -n1; return; fi
    sort -g <<< "$v" | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
ratio() { # ours theirs
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b == 0) { print "-"; exit }
        r = a / b
        if (r < 1) printf "%.3f (1/%.0f)", r, 1 / r; else printf "%.2f", r }'
}
fmt() { awk -v a="$1" 'BEGIN { if (a ~ /^[0-9.]+$/) printf "%.3f", a; else print a }'; }
# Shows the end of a failed run's output once, on stderr.
show_failure() {
    echo "bench-agent: $1 failed; its output ends:" >&2
    tail -n 12 "$2" | sed 's/^/    /' >&2
}

# agents_once LABEL N LAUNCHER... -- PROGRAM...: N agents on one endpoint
# (BACKEND, default c10d; ENDPOINT, default a free port of 127.0.0.1); prints
# the seconds from launching them to the last exit, or "timeout" /
# "failed".
agents_once() {
    local label=$1 n=$2 port out i t0 t1 rc bad=0 timed=0 pids=()
    shift 2
    local launcher=() prog=()
    while [ "$1" != -- ]; do launcher+=("$1"); shift; done
    shift
    prog=("$@")
    port=$(free_port)
    out=$TMP/agents.$RANDOM$RANDOM
    mkdir -p "$out"
    t0=$(now_ns)
    for ((i = 0; i < n; i++)); do
        PYTHON_EXEC=$PY timeout -k 5 "$CAP" "${launcher[@]}" --nnodes "$n" --nproc_per_node 1 \
            --rdzv_backend "${BACKEND:-c10d}" --rdzv_endpoint "${ENDPOINT:-127.0.0.1:$port}" \
            --rdzv_id "a$port$n" \
            "${STD[@]}" --log_dir "$out/logs.$i" "${prog[@]}" > "$out/log.$i" 2>&1 &
        pids+=($!)
        PIDS+=($!)
    done
    for ((i = 0; i < n; i++)); do
        wait "${pids[$i]}"
        rc=$?
        if [ $rc = 124 ] || [ $rc = 137 ]; then timed=1
        elif [ $rc != 0 ]; then [ $bad = 0 ] && show_failure "$label, $n agents, agent $i (exit $rc)" "$out/log.$i"; bad=$((bad + 1)); fi
    done
    t1=$(now_ns)
    PIDS=()
    rm -rf "$out"
    if [ $timed = 1 ]; then echo timeout
    elif [ $bad != 0 ]; then echo "failed($bad)"
    else awk -v d=$((t1 - t0)) 'BEGIN {printf "%.4f\n", d / 1e9}'; fi
}

agents() { # LABEL N LAUNCHER... -- PROGRAM...: median of REPS runs
    local label=$1 n=$2 v
    shift 2
    for _ in $(seq "$REPS"); do
        v=$(agents_once "$label" "$n" "$@")
        echo "$v"
        # One timeout is enough to know.
        [ "$v" = timeout ] && break
    done | median
}

# port_of LOG: the port of the "listening on HOST:PORT" line in LOG, or
# nothing yet (the file may not even exist yet).
port_of() { sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$1" 2>/dev/null | head -n1 || true; }

# start_server NAME CMD...: runs a server in the background, stderr in
# $TMP/NAME.err; sets SERVER_PID and SERVER_PORT once it has printed
# "listening on HOST:PORT" (ddprun-store and bench/torch_store_server.py
# both do); the caller defines die.
start_server() {
    local name=$1
    shift
    "$@" 2> "$TMP/$name.err" &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    SERVER_PORT=
    for _ in $(seq 300); do
        SERVER_PORT=$(port_of "$TMP/$name.err")
        [ -n "$SERVER_PORT" ] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    tail -n 5 "$TMP/$name.err" >&2
    die "$name did not report its port"
}

# field NAME LINE: the value of NAME=... in a one-line report (store-load,
# bootstrap-sim).
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<< " $2"; }
