#!/usr/bin/env bash
# 2000 clients connect to one ddprun-store at the same time, each ADDs to a
# counter and WAITs on a barrier key that the last one sets: every client
# must be released (store-load scale checks this, and that the ADD results
# are exactly 1..2000), and the server must still serve afterwards.
# timeout: 120
set -u
# shellcheck source=tests/lib/store.bash
. "$(dirname "$0")/../lib/store.bash"
[ -x "$STORE_LOAD" ] || die "$STORE_LOAD is not built (run make)"
# 2000 connections on each side need more descriptors than the usual 1024.
ulimit -n "$(ulimit -Hn)" 2>/dev/null
[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge 4200 ] ||
    skip "the descriptor limit ($(ulimit -n)) is too low for 2000 connections on each side"

start_store store 127.0.0.1
out=$("$STORE_LOAD" scale --host 127.0.0.1 --port "$STORE_PORT" --clients 2000 --timeout-ms 60000)
rc=$?
echo "$out"
if [ $rc -ne 0 ] || ! grep -q '^clients=2000 released=2000 dropped=0 ' <<< "$out"; then
    echo "--- ddprun-store stderr:"; tail -n 30 "$TMP/store.err"
    die "not every client was released (store-load exit $rc)"
fi
kill -0 "$STORE_PID" 2>/dev/null || die "ddprun-store died under 2000 clients"
# Still serving: a short closed-loop run from a fresh connection.
"$STORE_LOAD" bench --host 127.0.0.1 --port "$STORE_PORT" --conns 1 --seconds 0.3 --op add ||
    die "ddprun-store stopped serving after the scale run"
