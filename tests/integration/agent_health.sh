#!/usr/bin/env bash
# The health check on TORCHELASTIC_HEALTH_CHECK_PORT (torchrun's variable;
# here as 127.0.0.1:PORT): GET /health answers 503 naming the rendezvous
# while a 2-node job waits for its second node, 200 once both nodes' workers
# run (a fresh heartbeat), and nothing listens once the agent is gone. An
# unknown path is 404. A --metrics-port already in use stops the agent
# with an error naming the port and the flag; a health port that is not a
# port is an error naming TORCHELASTIC_HEALTH_CHECK_PORT. A port given
# without a host listens on 127.0.0.1 alone (the log says so, and so does
# the kernel's table of listening sockets); 0.0.0.0:PORT listens on every
# interface.
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
command -v curl > /dev/null || skip "skipped: curl is not installed"

rport=$(free_port)
hport=$(free_port)
url=http://127.0.0.1:$hport/health
code() { curl -s -o "$TMP/body" -w '%{http_code}' "$1"; }
common=(--nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint="127.0.0.1:$rport"
        --rdzv-id=health --no-python sleep 8)

TORCHELASTIC_HEALTH_CHECK_PORT=127.0.0.1:$hport start_ddprun a "${common[@]}"
wait_line 10 "$TMP/a.err" "TORCHELASTIC_HEALTH_CHECK_PORT: serving http://127.0.0.1:$hport/health"
assert_eq "$(code "$url")" 503 "GET /health while the rendezvous waits for the second node"
assert_grep "$TMP/body" '"reason":"rendezvous in progress"' "the 503's body"
assert_eq "$(code "http://127.0.0.1:$hport/nope")" 404 "an unknown path"

# The port is taken: a second agent asking for it as --metrics-port stops, naming both.
start_ddprun taken --standalone --metrics-port "127.0.0.1:$hport" --no-python true
wait_exit 10 "$PID_taken"
assert_rc taken 1
assert_grep "$TMP/taken.err" "--metrics-port: port $hport on 127.0.0.1 is in use by another program" \
    "the error for a port in use"

start_ddprun b "${common[@]}"
wait_line 15 "$TMP/a.err" "started 1 worker"
healthy() { [ "$(code "$url")" = 200 ]; }
wait_for 10 "GET /health to answer 200 while the workers run" healthy
assert_grep "$TMP/body" '"status":"ok","state":"running","workers_up":1' "the 200's body"

wait_exit 20 "$PID_a"
assert_rc a 0
wait_exit 20 "$PID_b"
assert_eq "$(code "$url")" 000 "GET /health after the agent exited (nothing listens)"

# listening PORT: the local address of the socket listening on PORT, as
# /proc/net/tcp and tcp6 write it (0100007F:1F90 is 127.0.0.1:8080).
listening() {
    awk -v p="$(printf ':%04X' "$1")" '$4 == "0A" && substr($2, length($2) - 4) == p { print $2 }' \
        /proc/net/tcp /proc/net/tcp6
}
mport=$(free_port)
start_ddprun where --standalone --metrics-port "$mport" --health-check-port "0.0.0.0:$hport" \
    --no-python sleep 30
wait_line 10 "$TMP/where.err" "--health-check-port: serving http://0.0.0.0:$hport/health"
assert_grep "$TMP/where.err" "--metrics-port: serving http://127.0.0.1:$mport/metrics" \
    "the metrics port's address when the flag names none"
assert_eq "$(listening "$mport")" "$(printf '0100007F:%04X' "$mport")" \
    "the address --metrics-port PORT listens on"
assert_eq "$(listening "$hport")" "$(printf '00000000:%04X' "$hport")" \
    "the address --health-check-port 0.0.0.0:PORT listens on"
got=$(code "http://127.0.0.1:$mport/health")
[[ "$got" =~ ^(200|503)$ ]] || die "GET /health on the metrics port: expected 200 or 503, got '$got'"
kill -TERM "$PID_where"
wait_exit 10 "$PID_where"

TORCHELASTIC_HEALTH_CHECK_PORT=http start_ddprun bad --standalone --no-python true
wait_exit 10 "$PID_bad"
assert_rc bad 2
assert_grep "$TMP/bad.err" "TORCHELASTIC_HEALTH_CHECK_PORT: 'http' is not PORT or HOST:PORT" \
    "the error for a bad TORCHELASTIC_HEALTH_CHECK_PORT"
echo "ok: 503 during the rendezvous, 200 while running, gone after exit; 127.0.0.1 unless asked"
