# A real etcd for the scenarios (Debian's etcd-server), on loopback ports
# of its own, its data under the scenario's $TMP; sourced after agent.bash,
# whose cleanup stops it (its PID goes in PIDS). Skips visibly without etcd.
#   etcd_cluster N   starts N members (m1..mN) as one cluster; sets
#                    ETCD_ENDPOINTS (host:port,...), ETCD_PORT_<i>, ETCD_PID_<i>
command -v etcd > /dev/null || skip "skipped: etcd is not installed (Debian's etcd-server)"

etcd_cluster() {
    local n=$1 i initial="" cport pport
    ETCD_ENDPOINTS=""
    for ((i = 1; i <= n; i++)); do
        cport=$(free_port)
        pport=$(free_port)
        eval "ETCD_PORT_$i=$cport ETCD_PEER_$i=$pport"
        initial="$initial${initial:+,}m$i=http://127.0.0.1:$pport"
        ETCD_ENDPOINTS="$ETCD_ENDPOINTS${ETCD_ENDPOINTS:+,}127.0.0.1:$cport"
    done
    for ((i = 1; i <= n; i++)); do
        cport=ETCD_PORT_$i
        pport=ETCD_PEER_$i
        etcd --name "m$i" --data-dir "$TMP/etcd-m$i" \
            --listen-client-urls "http://127.0.0.1:${!cport}" \
            --advertise-client-urls "http://127.0.0.1:${!cport}" \
            --listen-peer-urls "http://127.0.0.1:${!pport}" \
            --initial-advertise-peer-urls "http://127.0.0.1:${!pport}" \
            --initial-cluster "$initial" --initial-cluster-state new \
            --initial-cluster-token "ddprun-test-$$" > "$TMP/etcd-m$i.log" 2>&1 &
        eval "ETCD_PID_$i=$!"
        PIDS+=($!)
    done
    for ((i = 1; i <= n; i++)); do
        cport=ETCD_PORT_$i
        wait_for 20 "etcd member m$i to serve" etcd_healthy "127.0.0.1:${!cport}"
    done
}

# etcd_healthy HOST:PORT: whether the member answers and the cluster has a leader.
etcd_healthy() { ETCDCTL_API=3 etcdctl --endpoints "$1" endpoint health > /dev/null 2>&1; }

# etcd_bed_cluster [-p PORT] I...: one member on each of the network bed's
# test hosts I... (lib/netbed.bash, after netbed_up), as a cluster spread
# over machines has: member mI on host I, its client and peer URLs on the
# host's bed address, ports PORT and PORT+1 (2379 and 2380 by default:
# every host has ports of its own; another PORT makes a second cluster on
# the same hosts), its data in NETBED_DIR/hI/etcd-PORT and its log in
# $TMP/etcd-hI-PORT.log. Sets ETCD_ENDPOINTS (hI:PORT,..., names every
# host resolves) and ETCD_PID_<I>.
etcd_bed_cluster() {
    local i initial="" addr port=2379
    if [ "$1" = -p ]; then port=$2; shift 2; fi
    ETCD_ENDPOINTS=""
    for i in "$@"; do
        initial="$initial${initial:+,}m$i=http://$(netbed_addr "$i"):$((port + 1))"
        ETCD_ENDPOINTS="$ETCD_ENDPOINTS${ETCD_ENDPOINTS:+,}h$i:$port"
    done
    for i in "$@"; do
        addr=$(netbed_addr "$i")
        netbed_exec "$i" etcd --name "m$i" --data-dir "$NETBED_DIR/h$i/etcd-$port" \
            --listen-client-urls "http://$addr:$port" --advertise-client-urls "http://$addr:$port" \
            --listen-peer-urls "http://$addr:$((port + 1))" \
            --initial-advertise-peer-urls "http://$addr:$((port + 1))" \
            --initial-cluster "$initial" --initial-cluster-state new \
            --initial-cluster-token "ddprun-bed-$$-$port" > "$TMP/etcd-h$i-$port.log" 2>&1 &
        eval "ETCD_PID_$i=$!"
        PIDS+=($!)
    done
    for i in "$@"; do
        wait_for 20 "etcd member m$i on test host $i to serve" etcd_bed_healthy "$i" "h$i:$port"
    done
}

# etcd_bed_healthy I HOST:PORT: whether, seen from test host I, the member
# at HOST:PORT answers and its cluster has a leader.
etcd_bed_healthy() {
    ip netns exec "$(netbed_ns "$1")" env ETCDCTL_API=3 etcdctl --dial-timeout 1s \
        --command-timeout 2s --endpoints "$2" endpoint health > /dev/null 2>&1
}
