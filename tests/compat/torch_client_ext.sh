#!/usr/bin/env bash
# torch 2.x's own TCPStore client against ddprun-store, for what torch
# 1.13's client lacks: check, append, multi_get/multi_set, queues,
# list_keys, barrier, clone, a timed-out wait that keeps its connection;
# each result asserted in tests/compat/torch_client_ext.py. The same checks
# run first against torch's own server, so each expectation is torch's. With
# Debian's torch 1.13 it skips (run with TORCH_PY=build/torch2-venv/bin/python,
# as tests/run's second pass and make check-torch2 do).
# timeout: 120
set -u
# shellcheck source=tests/lib/store.bash
. "$(dirname "$0")/../lib/store.bash"
need_torch
missing=$("$TORCH_PY" "$ROOT/tests/compat/torch_client_ext.py" --missing) ||
    die "cannot ask torch's client what it has"
[ -z "$missing" ] || skip "$missing"

run_checks() { # NAME PORT (torch's warnings about its own timeouts left out)
    local rc=0
    "$TORCH_PY" "$ROOT/tests/compat/torch_client_ext.py" 127.0.0.1 "$2" > "$TMP/$1.out" 2>&1 || rc=$?
    grep -v '^\[W.*socket.cpp' "$TMP/$1.out"
    return $rc
}

# torch's own server, for reference, and ours; the two runs go side by
# side (each waits out several 1 s timeouts).
"$TORCH_PY" "$ROOT/bench/torch_store_server.py" --host 127.0.0.1 --port 0 2> "$TMP/torch.err" &
PIDS+=("$!")
start_store store 127.0.0.1
port=
for _ in $(seq 300); do
    port=$(sed -n 's/^listening on .*:\([0-9][0-9]*\)$/\1/p' "$TMP/torch.err" | head -n1)
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { cat "$TMP/torch.err"; die "torch's own store server did not start"; }
run_checks torch "$port" > "$TMP/torch.log" &
ref=$!
PIDS+=("$ref")
ours_rc=0
run_checks ours "$STORE_PORT" > "$TMP/ours.log" || ours_rc=$?
ref_rc=0
wait "$ref" || ref_rc=$?
echo "== against torch's own TCPStore server"
cat "$TMP/torch.log"
[ $ref_rc -eq 0 ] || die "torch's own server fails these checks: they no longer describe torch $TORCH_VERSION"
echo "== against ddprun-store"
cat "$TMP/ours.log"
[ $ours_rc -eq 0 ] || {
    echo "--- ddprun-store stderr:"; cat "$TMP/store.err"; die "torch $TORCH_VERSION's client checks failed against ddprun-store"
}
kill -0 "$STORE_PID" 2>/dev/null || die "ddprun-store died during the test"
