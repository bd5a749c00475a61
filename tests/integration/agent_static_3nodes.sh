#!/usr/bin/env bash
# Three agents with the static backend on one host, started in the order
# node 2, 1, 0 (node 0 hosts the store at --master-port; the others wait
# for it): global ranks follow --node-rank, not arrival, the world is
# 3 x nproc, and every agent exits 0.
# timeout: 40
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
port=$(free_port)
for i in 2 1 0; do
    W_REC=$TMP/rec start_ddprun "n$i" --rdzv-backend=static --nnodes=3 --node-rank=$i \
        --master-addr=127.0.0.1 --master-port="$port" --nproc-per-node=2 \
        --log-dir "$TMP/logs$i" --no-python "$WORKERS/worker.sh"
    [ $i = 0 ] || sleep 0.3
done
for i in 0 1 2; do
    pid=PID_n$i
    wait_exit 20 "${!pid}"
    assert_rc "n$i" 0
done

records | sort -t= -k3 > "$TMP/all"
cat "$TMP/all"
assert_eq "$(wc -l < "$TMP/all")" 6 "worker starts"
for node in 0 1 2; do
    for lr in 0 1; do
        rank=$((node * 2 + lr))
        line=$(grep -E " RANK=$rank " "$TMP/all") || die "no worker has RANK=$rank"
        [ "$(wc -l <<< "$line")" = 1 ] || die "RANK=$rank appears more than once"
        for kv in LOCAL_RANK=$lr GROUP_RANK=$node ROLE_RANK=$rank LOCAL_WORLD_SIZE=2 \
            WORLD_SIZE=6 GROUP_WORLD_SIZE=3 ROLE_WORLD_SIZE=6 MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port TORCHELASTIC_RESTART_COUNT=0; do
            assert_eq "$(field "$line" "${kv%%=*}")" "${kv#*=}" "${kv%%=*} of rank $rank"
        done
    done
    # Each node's console shows its own workers' ranks.
    assert_grep "$TMP/n$node.out" "^worker rank $((node * 2)) of 6 started" "node $node's console"
    assert_grep "$TMP/n$node.out" "^worker rank $((node * 2 + 1)) of 6 started" "node $node's console"
done
assert_no_leftovers
echo "3 static nodes: ranks by node rank, world 6, all exit 0"
