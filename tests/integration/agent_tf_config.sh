#!/usr/bin/env bash
# --tf-config: every worker gets TensorFlow's TF_CONFIG, {"cluster":
# {"worker": [host:port, ...]}, "task": {"type": "worker", "index": RANK}},
# the same list for all, in rank order, with a port for each worker that
# no other worker has (each agent picks its own and publishes them through
# the rendezvous). (1) One agent, 2 workers; a TF_CONFIG in the agent's own
# environment is replaced. (2) Two agents (c10d), 2 workers each: the
# workers of both nodes list the same 4 workers; after a failure the new
# round's workers get the list again. (3) PET_TF_CONFIG=1 turns it on; an
# agent without it joining one with it is refused, naming the host. (4) The
# same through the etcd-v3 rendezvous.
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
cat > "$TMP/w.sh" << 'SH'
#!/bin/sh
echo "rank=$RANK restart=$TORCHELASTIC_RESTART_COUNT tf=$TF_CONFIG" >> "$REC"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ -n "$FAIL" ]; then
    if [ "$RANK" = 3 ]; then # once every worker of the round has said what it got
        while [ "$(grep -c "restart=0" "$REC")" -lt 4 ]; do sleep 0.05; done
        exit 3
    fi
    sleep 20 # (stopped by the restart)
fi
exit 0
SH
chmod +x "$TMP/w.sh"
# check FILE RESTART N: the N workers of that restart agree, index = rank, ports unique.
check() {
    /usr/bin/python3 - "$1" "$2" "$3" 2>&1 << 'PY' || { cat "$1"; die "TF_CONFIG is wrong (above)"; }
import json, sys
path, restart, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen = {}
for line in open(path):
    f = dict(kv.split("=", 1) for kv in line.split(" ", 2))
    if f["restart"] != restart:
        continue
    tf = json.loads(f["tf"])
    assert tf["task"] == {"type": "worker", "index": int(f["rank"])}, line
    seen[int(f["rank"])] = tf["cluster"]["worker"]
assert sorted(seen) == list(range(n)), f"ranks {sorted(seen)}"
lists = list(seen.values())
assert all(l == lists[0] for l in lists), lists
assert len(lists[0]) == n and len(set(lists[0])) == n, lists[0]
for hp in lists[0]:
    host, port = hp.rsplit(":", 1)
    assert 0 < int(port) < 65536, hp
print(f"restart {restart}: {n} workers, {lists[0]}")
PY
}

# (1) one agent
REC=$TMP/one TF_CONFIG='{"stale": 1}' start_ddprun one --standalone --nproc-per-node 2 --tf-config \
    --no-python sh -c 'echo "rank=$RANK restart=$TORCHELASTIC_RESTART_COUNT tf=$TF_CONFIG" >> "$REC"'
wait_exit 20 "$PID_one"
assert_rc one 0
check "$TMP/one" 0 2

# (2) two agents, a failure in the first round
port=$(free_port)
for n in a b; do
    FAIL=1 REC=$TMP/two start_ddprun "$n" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \
        --rdzv-endpoint 127.0.0.1:"$port" --rdzv-id tf --max-restarts 1 --tf-config --no-python "$TMP/w.sh"
    [ "$n" = a ] && wait_for 10 "a's store on port $port" store_up "$port"
done
wait_all_rc 30 0 a b
check "$TMP/two" 0 4
check "$TMP/two" 1 4

# (3) PET_TF_CONFIG, and an agent without it refused
port=$(free_port)
REC=$TMP/three PET_TF_CONFIG=1 start_ddprun c --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint 127.0.0.1:"$port" --rdzv-id tf3 --no-python "$TMP/w.sh"
wait_for 10 "c's store on port $port" store_up "$port"
REC=$TMP/three start_ddprun d --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint 127.0.0.1:"$port" --rdzv-id tf3 --no-python "$TMP/w.sh"
wait_exit 30 "$PID_c"
assert_rc c 1
assert_grep "$TMP/c.err" "--tf-config: the agent on .* published - for its 1 workers' ports \(is it running ddprun with --tf-config too\?\)" \
    "the agent without --tf-config"
wait_exit 30 "$PID_d"

# (4) the etcd-v3 rendezvous publishes the ports the same way
etcd_part="etcd part skipped: etcd is not installed"
if command -v etcd > /dev/null; then
    # shellcheck source=tests/lib/etcd.bash
    source "$ROOT/tests/lib/etcd.bash"
    etcd_cluster 1
    for n in e f; do
        REC=$TMP/four start_ddprun "$n" --nnodes 2 --nproc-per-node 2 --rdzv-backend etcd-v3 \
            --rdzv-endpoint "$ETCD_ENDPOINTS" --rdzv-id tf4 --tf-config --no-python "$TMP/w.sh"
    done
    wait_all_rc 30 0 e f
    check "$TMP/four" 0 4
    etcd_part="and on etcd-v3"
fi
echo "ok: TF_CONFIG for 2 workers on one node, for 4 on two nodes in two rounds, $etcd_part; refused without --tf-config on a node"
