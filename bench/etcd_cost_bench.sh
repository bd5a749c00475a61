#!/usr/bin/env bash
# What one etcd member's CPU costs per lease keep-alive (`make
# bench-etcd-cost`), two ways side by side on one member of this machine:
#
#  1. through etcd's JSON gateway (HTTP/1.1 POST /v3/lease/keepalive on one
#     kept-open connection), the way ddprun's agents renew their heartbeat;
#  2. on gRPC keep-alive streams (`etcdctl lease keep-alive`, one stream
#     per lease, each renewing every third of its TTL), the way etcd's Go
#     client does.
#
# The question it answers: would agents that keep their leases alive on a
# gRPC stream cost etcd less than the gateway's one call per renewal? etcd's
# CPU is read from /proc (every thread), its keep-alives from its own
# counters (/metrics), with an idle stretch subtracted. Environment:
# STREAMS (gRPC streams, 100), GATEWAY_CALLS (2000), SECONDS_STREAMS (20).
# Reports; asserts nothing about timings.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON_EXEC:-python3}
STREAMS=${STREAMS:-100}
CALLS=${GATEWAY_CALLS:-2000}
SECS=${SECONDS_STREAMS:-20}
TMP=$(mktemp -d /tmp/ddprun-etcd-cost.XXXXXX)
PIDS=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT
die() { echo "bench-etcd-cost: $*" >&2; exit 1; }
for c in etcd etcdctl curl; do command -v "$c" > /dev/null || die "needs $c (scripts/install-deps)"; done
# shellcheck source=bench/lib.bash
source "$ROOT/bench/lib.bash"

cport=$(free_port)
pport=$(free_port)
EP=127.0.0.1:$cport
etcd --name cost --data-dir "$TMP/etcd" --listen-client-urls "http://$EP" \
    --advertise-client-urls "http://$EP" --listen-peer-urls "http://127.0.0.1:$pport" \
    --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "cost=http://127.0.0.1:$pport" > "$TMP/etcd.log" 2>&1 &
ETCD=$!
PIDS+=("$ETCD")
for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints "$EP" endpoint health > /dev/null 2>&1 && break
    sleep 0.1
done
ETCDCTL_API=3 etcdctl --endpoints "$EP" endpoint health > /dev/null 2>&1 || die "etcd did not start"

TCK=$(getconf CLK_TCK)
etcd_cpu() { awk -v t="$TCK" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$ETCD/stat"; }
# The keep-alives etcd has received so far: messages on its streams, and
# streams (one per gateway call).
stream_msgs() {
    curl -s "http://$EP/metrics" | awk '/^grpc_server_msg_received_total.*LeaseKeepAlive/ { s += $2 } END { print s + 0 }'
}
streams_handled() {
    curl -s "http://$EP/metrics" | awk '/^grpc_server_handled_total.*LeaseKeepAlive/ { s += $2 } END { print s + 0 }'
}

echo "# etcd's CPU per lease keep-alive: the JSON gateway against gRPC streams"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); $(etcd --version | head -n1)"
echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1))"
echo "- command: \`make bench-etcd-cost\` (bench/etcd_cost_bench.sh; STREAMS=$STREAMS" \
     "GATEWAY_CALLS=$CALLS SECONDS_STREAMS=$SECS)"
echo

# Idle: what etcd spends with nothing asked of it.
c0=$(etcd_cpu); sleep 5; c1=$(etcd_cpu)
idle=$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.4f", (b - a) / 5 }')

# 1. The gateway, one connection, CALLS keep-alives back to back.
cat > "$TMP/gateway.py" <<'EOF'
import http.client, json, sys, time
host, port = sys.argv[1].split(":")
n = int(sys.argv[2])
c = http.client.HTTPConnection(host, int(port))
def call(path, body):
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return json.loads(c.getresponse().read())
ids = [call("/v3/lease/grant", {"TTL": 60})["ID"] for _ in range(10)]
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()
t = time.time()
for i in range(n):
    if int(call("/v3/lease/keepalive", {"ID": ids[i % 10]})["result"]["TTL"]) <= 0:
        sys.exit("lease lapsed")
sys.stdout.write("%.3f\n" % (time.time() - t)); sys.stdout.flush()
EOF
coproc GW { "$PY" "$TMP/gateway.py" "$EP" "$CALLS"; }
read -r _ <&"${GW[0]}"
h0=$(streams_handled); c0=$(etcd_cpu)
echo go >&"${GW[1]}"
read -r gw_secs <&"${GW[0]}" || die "the gateway client failed"
c1=$(etcd_cpu); h1=$(streams_handled)
gw_n=$((h1 - h0))
gw_ms=$(awk -v a="$c0" -v b="$c1" -v n="$gw_n" -v i="$idle" -v s="$gw_secs" \
    'BEGIN { printf "%.3f", (b - a - i * s) * 1000 / n }')

# 2. STREAMS leases, each kept alive by etcdctl on a stream of its own.
for _ in $(seq "$STREAMS"); do
    id=$(ETCDCTL_API=3 etcdctl --endpoints "$EP" lease grant 3 | awk '{ print $2 }')
    ETCDCTL_API=3 etcdctl --endpoints "$EP" lease keep-alive "$id" > /dev/null 2>&1 &
    PIDS+=($!)
done
sleep 3
m0=$(stream_msgs); c0=$(etcd_cpu)
sleep "$SECS"
m1=$(stream_msgs); c1=$(etcd_cpu)
st_n=$((m1 - m0))
st_ms=$(awk -v a="$c0" -v b="$c1" -v n="$st_n" -v i="$idle" -v s="$SECS" \
    'BEGIN { printf "%.3f", (b - a - i * s) * 1000 / n }')

echo "| keep-alives | how many | etcd CPU per keep-alive |"
echo "| --- | ---: | ---: |"
echo "| JSON gateway, one call each | $gw_n | $gw_ms ms |"
echo "| gRPC streams ($STREAMS, etcdctl) | $st_n | $st_ms ms |"
echo
echo "- etcd idle: $idle s of CPU a second (subtracted)"
echo "- streams / gateway: $(ratio "$st_ms" "$gw_ms")"
