#!/usr/bin/env bash
# timeout: 120
# ddprun-store under clients that do not play fair (issue: hostile input):
# pipelined GETs of a 1 MiB value that are never read (the server stops
# reading that client's requests once 9 MiB of replies wait, so it stays
# small and other clients are served at once), 1,100 torch 1.13 watches on
# one connection (dropped past 1,024), and half a request followed by
# silence (dropped after --request-timeout). store_backpressure.py speaks
# the raw protocol.
set -u
ROOT=${DDPRUN_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
SCRATCH=$(mktemp -d /tmp/store-bp.XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$SCRATCH"; }
trap cleanup EXIT
"$ROOT/build/bin/ddprun-store" --host 127.0.0.1 --port 0 --request-timeout 2 \
    2> "$SCRATCH/store.err" &
pid=$!
port=
for _ in $(seq 100); do
    port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$SCRATCH/store.err")
    [ -n "$port" ] && break
    sleep 0.05
done
[ -n "$port" ] || { echo "FAIL: ddprun-store did not start"; cat "$SCRATCH/store.err"; exit 1; }
/usr/bin/python3 "$ROOT/tests/integration/store_backpressure.py" 127.0.0.1 "$port" "$pid" \
    "$SCRATCH/store.err" || { echo "--- the store's log"; tail -n 20 "$SCRATCH/store.err"; exit 1; }
kill -0 "$pid" || { echo "FAIL: the store died"; exit 1; }
