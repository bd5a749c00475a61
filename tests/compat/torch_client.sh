#!/usr/bin/env bash
# PyTorch's own TCPStore client against ddprun-store: the operations every
# torch has (set/get/add/compare_set/wait/num_keys/delete_key), each result
# asserted in tests/compat/torch_client.py. Against Debian's torch 1.13 (old
# protocol generation) or, with TORCH_PY, torch 2.x (current generation).
# timeout: 90
set -u
# shellcheck source=tests/lib/store.bash
. "$(dirname "$0")/../lib/store.bash"
need_torch

start_store store 127.0.0.1
"$TORCH_PY" "$ROOT/tests/compat/torch_client.py" 127.0.0.1 "$STORE_PORT" || {
    echo "--- ddprun-store stderr:"; cat "$TMP/store.err"; die "torch client checks failed"
}
kill -0 "$STORE_PID" 2>/dev/null || die "ddprun-store died during the test"
