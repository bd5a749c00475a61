#!/usr/bin/env bash
# SIGTERM to ddprun: it forwards the signal to the workers; workers that
# ignore it are SIGKILLed after --shutdown-timeout=1, workers that handle
# it end at once; either way ddprun exits 143 (128 + SIGTERM) and no
# worker is left.
# timeout: 40
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

# term_run NAME TIMEOUT: starts 2 workers (W_* from the caller), sends
# SIGTERM once both run, sets ELAPSED (ms from the signal to ddprun's exit).
term_run() {
    mkdir -p "$TMP/rec-$1"
    W_REC=$TMP/rec-$1 W_HOLD=true W_HOLD_MAX=30 \
        start_ddprun "$1" --standalone --nproc-per-node=2 --shutdown-timeout="$2" \
        --log-dir "$TMP/logs-$1" --no-python "$WORKERS/worker.sh"
    two() { [ "$(ls "$TMP/rec-$1" | wc -l)" -ge 2 ]; }
    wait_for 15 "2 workers ($1) to start" two "$1"
    local t0
    t0=$(now_ms)
    kill -TERM "$LAST_PID"
    wait_exit 15 "$LAST_PID"
    ELAPSED=$(($(now_ms) - t0))
    assert_rc "$1" 143
    assert_no_leftovers 1
    echo "$1: ddprun exited 143 ${ELAPSED} ms after SIGTERM"
}

# Workers that ignore SIGTERM: killed after the 1 s shutdown timeout.
W_IGNORE_TERM=1 term_run stubborn 1
[ "$ELAPSED" -ge 900 ] || die "ddprun exited after $ELAPSED ms, before the 1 s shutdown timeout"
[ "$ELAPSED" -lt 4000 ] || die "ddprun took $ELAPSED ms, far more than the 1 s shutdown timeout"
assert_grep "$TMP/stubborn.err" "SIGTERM received" "ddprun's log"
assert_grep "$TMP/stubborn.err" "did not stop within the shutdown timeout; sending SIGKILL" \
    "ddprun's log of the SIGKILL"

# Workers that handle SIGTERM and exit: ddprun does not wait for the timeout.
W_ON_TERM=1 term_run prompt 30
[ "$ELAPSED" -lt 2000 ] || die "ddprun took $ELAPSED ms to stop workers that exit on SIGTERM"
assert_grep "$TMP/prompt.out" "^rank 0 got SIGTERM$" "rank 0's SIGTERM handler"
assert_grep "$TMP/prompt.out" "^rank 1 got SIGTERM$" "rank 1's SIGTERM handler"
assert_no_grep "$TMP/prompt.err" "did not stop" "ddprun's log"
