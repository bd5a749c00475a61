#!/usr/bin/env bash
# Two torch.distributed processes (gloo; TORCH_PY's torch, see
# tests/lib/torch.bash) rendezvous through ddprun-store
# the way torchrun's workers use the agent's store
# (TORCHELASTIC_USE_AGENT_STORE=True, env://), then all_reduce, broadcast
# and barrier. Rank 0 must not host a store of its own: MASTER_PORT is
# ddprun-store's port, so a second server there could not even bind.
# timeout: 120
set -u
# shellcheck source=tests/lib/store.bash
. "$(dirname "$0")/../lib/store.bash"
need_torch

start_store store 127.0.0.1
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$STORE_PORT WORLD_SIZE=2
export TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=0
# Gloo picks a network interface for its own connections; loopback keeps
# the test on this machine.
export GLOO_SOCKET_IFNAME=lo

ranks=()
for r in 0 1; do
    RANK=$r LOCAL_RANK=$r "$TORCH_PY" "$ROOT/tests/compat/torch_gloo.py" > "$TMP/rank$r.out" 2>&1 &
    ranks+=("$!")
    PIDS+=("$!")
done
fail=0
for r in 0 1; do
    if ! wait "${ranks[$r]}"; then
        echo "--- rank $r output:"; cat "$TMP/rank$r.out"; fail=1
    else
        cat "$TMP/rank$r.out"
    fi
done
if [ $fail -ne 0 ]; then
    echo "--- ddprun-store stderr:"; cat "$TMP/store.err"
    die "the gloo job did not complete"
fi

# The job's keys must be in ddprun-store (proof that it was the store used).
n=$("$TORCH_PY" -c "
import datetime, sys, torch.distributed as d
print(d.TCPStore('127.0.0.1', int(sys.argv[1]), is_master=False,
                 timeout=datetime.timedelta(seconds=10)).num_keys())" "$STORE_PORT") ||
    die "cannot read num_keys from ddprun-store"
echo "keys in ddprun-store after the job: $n"
[ "$n" -gt 0 ] || die "the job wrote no keys to ddprun-store"
kill -0 "$STORE_PID" 2>/dev/null || die "ddprun-store died during the test"
