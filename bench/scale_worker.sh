#!/bin/sh
# One rank of bench/scale_bench.sh: notes when it started (ns since the
# epoch), its pid and ranks in its node's file, then waits to be stopped.
echo "$(date +%s%N) $$ ${RANK:-} ${GROUP_RANK:-} ${TORCHELASTIC_RESTART_COUNT:-}" >> "$SCALE_OUT/n$SCALE_NODE"
exec sleep 1000000
