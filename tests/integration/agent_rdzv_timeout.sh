#!/usr/bin/env bash
# c10d rendezvous that cannot complete: --nnodes=2 with a single agent and
# join_timeout=2: ddprun exits 1 after about 2 s with a message saying the
# rendezvous timed out and how many nodes joined; no worker starts.
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
port=$(free_port)
t0=$(now_ms)
W_REC=$TMP/rec start_ddprun a --nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:"$port" \
    --rdzv-id=lonely --rdzv-conf=join_timeout=2 --log-dir "$TMP/logs" \
    --no-python "$WORKERS/worker.sh"
wait_exit 15 "$PID_a"
elapsed=$(($(now_ms) - t0))
cat "$TMP/a.err"
assert_rc a 1
assert_grep "$TMP/a.err" "rendezvous 'lonely' timed out after 2 s" "the error message"
assert_grep "$TMP/a.err" "1 of min 2 nodes joined \($(hostname)\)" "the error message"
assert_eq "$(records | wc -l)" 0 "workers started"
[ "$elapsed" -ge 1900 ] || die "ddprun gave up after $elapsed ms, before join_timeout=2"
[ "$elapsed" -lt 6000 ] || die "ddprun took $elapsed ms to time out with join_timeout=2"
assert_no_leftovers
echo "rendezvous timeout: exit 1 after $elapsed ms"
