#!/usr/bin/env bash
# The health port cannot be held shut: while 300 connections each send one
# byte a second and never finish their request, GET /health (from Python
# and from curl) keeps answering within a second, for 8 s; a request head
# larger than the server takes gets 431 and is closed; a client that sends
# nothing is closed at the deadline (5 s from its connect); HEAD has
# headers and no body, HTTP/1.0 works; and the agent's stderr has not one
# line about any of these connections. agent_health_slow_clients.py is the
# clients.
# timeout: 90
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
command -v curl > /dev/null || skip "skipped: curl is not installed"

hport=$(free_port)
start_ddprun a --standalone --nproc-per-node=1 --health-check-port "127.0.0.1:$hport" \
    --no-python sleep 60
wait_line 10 "$TMP/a.err" "--health-check-port: serving http://127.0.0.1:$hport/health"
wait_line 10 "$TMP/a.err" "started 1 worker"
lines_before=$(wc -l < "$TMP/a.err")

/usr/bin/python3 "$(dirname "$0")/agent_health_slow_clients.py" "$hport" "$PID_a" 300 8 &
clients=$!
PIDS+=("$clients")
sleep 3
t0=$(now_ms)
code=$(curl -s -m 5 -o "$TMP/body" -w '%{http_code}' "http://127.0.0.1:$hport/health")
took=$(($(now_ms) - t0))
assert_eq "$code" 200 "curl GET /health while the slow clients hold on"
[ "$took" -le 1000 ] || die "curl GET /health took $took ms while the slow clients held on"
echo "curl GET /health under the slow clients: $took ms"
wait "$clients" || die "the slow clients' checks failed (above)"

exited "$PID_a" && { dump a; die "the agent died under the slow clients"; }
# Nothing per connection: the agent's log has not grown since the worker started.
lines_after=$(wc -l < "$TMP/a.err")
if [ "$lines_after" != "$lines_before" ]; then
    tail -n +$((lines_before + 1)) "$TMP/a.err" | head -n 5 >&2
    die "the agent wrote $((lines_after - lines_before)) line(s) on stderr while serving the clients"
fi
echo "ok: /health answered under 300 slow clients; too large a head and silence are closed; no log noise"
