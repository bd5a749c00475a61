#!/usr/bin/env bash
# PyTorch's own TCPStore client through a per-node store proxy
# (ddprun-store --proxy-to): every check of torch_client.py (and, with torch
# 2.x, of torch_client_ext.py: append, multi_get/multi_set, queues,
# list_keys, a timed-out wait that keeps its connection) passes as against
# the store itself, while the store sees the proxy's one connection. With
# Debian's torch 1.13 (old protocol generation) or TORCH_PY's torch 2.x.
# timeout: 120
set -u
# shellcheck source=tests/lib/store.bash
. "$(dirname "$0")/../lib/store.bash"
need_torch

start_store store 127.0.0.1 -v
store_port=$STORE_PORT
start_store proxy 127.0.0.1 --proxy-to "127.0.0.1:$store_port"
"$TORCH_PY" "$ROOT/tests/compat/torch_client.py" 127.0.0.1 "$STORE_PORT" || {
    cat "$TMP/store.err" "$TMP/proxy.err"; die "torch client checks failed through the proxy"
}
missing=$("$TORCH_PY" "$ROOT/tests/compat/torch_client_ext.py" --missing) ||
    die "cannot ask torch's client what it has"
if [ -z "$missing" ]; then # (on a store of its own: its checks begin with an empty one)
    start_store store2 127.0.0.1
    start_store proxy2 127.0.0.1 --proxy-to "127.0.0.1:$STORE_PORT"
    "$TORCH_PY" "$ROOT/tests/compat/torch_client_ext.py" 127.0.0.1 "$STORE_PORT" \
        > "$TMP/ext.out" 2>&1 || {
        grep -v '^\[W.*socket.cpp' "$TMP/ext.out"; cat "$TMP/store2.err" "$TMP/proxy2.err"
        die "torch 2.x client checks failed through the proxy"
    }
    echo "torch 2.x's extended checks passed through the proxy"
fi
# The store saw the proxy's connection alone (-v logs each one it accepts):
# its clients rode on it as channels.
conns=$(grep -c "connected$" "$TMP/store.err" || true)
[ "$conns" = 1 ] || { cat "$TMP/store.err"; die "the store saw $conns connections, not 1"; }
grep -q "multiplexed" "$TMP/store.err" || die "the store did not log the multiplexed connection"
kill -0 "$STORE_PID" 2>/dev/null || die "the proxy died during the test"
echo "torch $("$TORCH_PY" -c 'import torch; print(torch.__version__)') through the proxy: ok"
