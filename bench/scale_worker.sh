#!/bin/sh
# One rank of bench/scale_bench.sh: with SCALE_STORE set, first what
# init_process_group does in the store (every rank ADDs to a counter, the
# last SETs "go", every rank WAITs for it), through its node's store proxy
# where the agent runs one; then it notes when it started (ns since the
# epoch), its pid and ranks in its node's file, and waits to be stopped.
if [ -n "${SCALE_STORE:-}" ]; then
    cli="ddprun-store-cli --host $MASTER_ADDR --port $MASTER_PORT --timeout 120000"
    n=$($cli add scale/init 1) || exit 1
    [ "$n" = "$WORLD_SIZE" ] && { $cli set scale/go 1 > /dev/null || exit 1; }
    $cli wait scale/go > /dev/null || exit 1
fi
echo "$(date +%s%N) $$ ${RANK:-} ${GROUP_RANK:-} ${TORCHELASTIC_RESTART_COUNT:-}" >> "$SCALE_OUT/n$SCALE_NODE"
exec sleep 1000000
