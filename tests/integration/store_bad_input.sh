#!/usr/bin/env bash
# Misbehaving clients (unknown query type, huge length prefixes, a SET sent
# a byte at a time, clients vanishing mid-request, a wrong handshake magic,
# one connection over --max-conns): ddprun-store drops each bad client with
# one log line naming it and keeps serving everyone else. The clients are
# raw sockets in tests/integration/store_bad_input.py.
# timeout: 60
set -u
# shellcheck source=tests/lib/store.bash
. "$(dirname "$0")/../lib/store.bash"
[ -x "$PY" ] || skip "no /usr/bin/python3 for the raw-socket clients"

start_store main 127.0.0.1
"$PY" "$ROOT/tests/integration/store_bad_input.py" main 127.0.0.1 "$STORE_PORT" "$TMP/main.err" || {
    echo "--- ddprun-store stderr:"; cat "$TMP/main.err"; die "bad-input cases failed"
}
kill -0 "$STORE_PID" 2>/dev/null || die "ddprun-store died after the bad clients"

start_store limited 127.0.0.1 --max-conns 5
"$PY" "$ROOT/tests/integration/store_bad_input.py" maxconns 127.0.0.1 "$STORE_PORT" "$TMP/limited.err" || {
    echo "--- ddprun-store --max-conns 5 stderr:"; cat "$TMP/limited.err"; die "--max-conns case failed"
}
kill -0 "$STORE_PID" 2>/dev/null || die "ddprun-store --max-conns 5 died"
# The same cases over IPv6 loopback, where the machine has it: the log
# lines must name [::1]:PORT clients too.
if "$PY" -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
    start_store v6 ::1
    "$PY" "$ROOT/tests/integration/store_bad_input.py" main ::1 "$STORE_PORT" "$TMP/v6.err" || {
        echo "--- ddprun-store --host ::1 stderr:"; cat "$TMP/v6.err"; die "bad-input cases over ::1 failed"
    }
    kill -0 "$STORE_PID" 2>/dev/null || die "ddprun-store on ::1 died after the bad clients"
else
    echo "no IPv6 loopback here: the ::1 cases were not run"
fi
echo "--- server logs:"
cat "$TMP"/*.err
