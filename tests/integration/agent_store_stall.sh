#!/usr/bin/env bash
# A worker set-up that hangs is not silent: two workers each wait in the
# agent's store for a key that only the other would set, and neither sets
# it (as when a rank never reaches its set-up, or reads another round's
# keys). After DDPRUN_STORE_STALL_S (1 s here; 60 by default) the agent
# names, in one warning, each waiting client by rank and pid and the key it
# waits for; through the agent's store proxy (--store-proxy on), the agent
# names them so itself. A wait that ends in time, and the agents' own waits,
# are never reported; a bad DDPRUN_STORE_STALL_S is refused.
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
worker=$TMP/wait.sh
cat > "$worker" <<'SH'
#!/usr/bin/env bash
# rank R waits for "ready_from_<other rank>"; with QUICK set, the other's key
# comes at once (from rank 1) and nothing stalls
other=$((1 - RANK))
[ -n "${QUICK:-}" ] && [ "$RANK" = 1 ] &&
    ddprun-store-cli --port "$MASTER_PORT" set "ready_from_1" x > /dev/null
[ -n "${QUICK:-}" ] && [ "$RANK" = 0 ] && exec ddprun-store-cli --port "$MASTER_PORT" --timeout 20000 wait "ready_from_1"
[ -n "${QUICK:-}" ] && exit 0
exec ddprun-store-cli --port "$MASTER_PORT" --timeout 20000 wait "ready_from_$other"
SH
chmod +x "$worker"
export DDPRUN_STORE_STALL_S=1
start_ddprun stuck --standalone --nproc-per-node=2 --no-python "$worker"
wait_line 15 "$TMP/stuck.err" "store: clients have waited over 1 s"
# Each wait is named once, when it passes the second: both in one warning
# as a rule, in two when the second rank began its wait after the sweep
# (every quarter of the time) that named the first.
named() { [ "$(grep "store: clients have waited" "$TMP/stuck.err" | grep -cE "rank $1 \(pid [0-9]+, [^)]*\) waits for 'ready_from_$((1 - $1))'")" -ge 1 ]; }
for _ in $(seq 40); do named 0 && named 1 && break; sleep 0.1; done
line=$(grep "store: clients have waited" "$TMP/stuck.err")
for r in 0 1; do
    n=$(grep -cE "rank $r \(pid [0-9]+, [^)]*\) waits for 'ready_from_$((1 - r))'" <<< "$line")
    [ "$n" = 1 ] || { dump stuck; die "the stall reports name rank $r and its key $n times, not once: $line"; }
done
[ "$(grep -c "store: clients have waited" "$TMP/stuck.err")" -le 2 ] || { dump stuck; die "reported more than once"; }
kill -TERM "$PID_stuck"
wait_exit 30 "$PID_stuck"
echo "reported: ${line#*ddprun: warning: }"

# Through the agent's store proxy the store can name only the node's proxy;
# the agent names its own workers, by rank and pid.
start_ddprun proxied --standalone --store-proxy on --nproc-per-node=2 --no-python "$worker"
proxy_named() { grep "store proxy: workers of this node have waited over 1 s" "$TMP/proxied.err" |
    grep -qE "rank $1 \(pid [0-9]+\) waits for 'ready_from_$((1 - $1))'"; }
for _ in $(seq 150); do proxy_named 0 && proxy_named 1 && break; sleep 0.1; done
{ proxy_named 0 && proxy_named 1; } || { dump proxied; die "the proxy did not name both waiting ranks"; }
kill -TERM "$PID_proxied"
wait_exit 30 "$PID_proxied"
echo "reported by the proxy: $(grep "store proxy: workers of this node" "$TMP/proxied.err" | head -n1 | sed 's/.*warning: //')"

# A wait that ends within the time: nothing said.
QUICK=1 start_ddprun quick --standalone --nproc-per-node=2 --no-python "$worker"
wait_exit 30 "$PID_quick"
assert_rc quick 0
sleep 1.5
assert_no_grep "$TMP/quick.err" "store: clients have waited" "a wait that ended in time"

DDPRUN_STORE_STALL_S=soon start_ddprun bad --standalone --nproc-per-node=1 --no-python true
wait_exit 10 "$PID_bad"
[ "$RC" != 0 ] || die "DDPRUN_STORE_STALL_S=soon was taken"
assert_grep "$TMP/bad.err" "DDPRUN_STORE_STALL_S=soon: not a number of seconds" "the refusal"
assert_no_leftovers
