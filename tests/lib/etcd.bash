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
