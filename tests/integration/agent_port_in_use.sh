#!/usr/bin/env bash
# Static backend, node rank 0, --master-port held by a program that is not
# a ddprun store (a plain Python listener): ddprun exits 1 at once with a
# message naming the port and saying it is in use, and starts no worker.
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
print(s.getsockname()[1], flush=True)
time.sleep(60)
' > "$TMP/listener" &
PIDS+=($!)
wait_for 10 "the listener's port" test -s "$TMP/listener"
port=$(cat "$TMP/listener")

t0=$(now_ms)
W_REC=$TMP/rec start_ddprun a --rdzv-backend=static --nnodes=2 --node-rank=0 \
    --master-addr=127.0.0.1 --master-port="$port" --log-dir "$TMP/logs" \
    --no-python "$WORKERS/worker.sh"
wait_exit 15 "$PID_a"
elapsed=$(($(now_ms) - t0))
cat "$TMP/a.err"
assert_rc a 1
assert_grep "$TMP/a.err" "port $port\b.*in use" "the error message"
assert_grep "$TMP/a.err" "--master-port" "the error message (what to change)"
assert_eq "$(records | wc -l)" 0 "workers started"
[ "$elapsed" -lt 5000 ] || die "ddprun took $elapsed ms to give up on a port in use"
assert_no_leftovers
echo "port in use: exit 1 after $elapsed ms"
