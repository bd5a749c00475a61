#!/usr/bin/env bash
# A job on a three-member etcd cluster does not notice the loss of the
# member its agents talk to: the agents fail over to the others, their
# heartbeats keep their leases alive, no restart happens, and the job ends
# with exit 0 once its workers finish.
# timeout: 90
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
# shellcheck source=tests/lib/etcd.bash
source "$(dirname "$0")/../lib/etcd.bash"
etcd_cluster 3
for n in a b; do
    W_HOLD="[ ! -e $TMP/release ]" start_ddprun "$n" --nnodes=2 --nproc-per-node=1 \
        --rdzv-backend=etcd-v3 --rdzv-endpoint="$ETCD_ENDPOINTS" --rdzv-id=m1 \
        --no-python "$WORKERS/worker.sh"
done
wait_line 30 "$TMP/a.err" "started 1 worker"
wait_line 30 "$TMP/b.err" "started 1 worker"
kill -KILL "$ETCD_PID_1" # the first listed: the one both talk to
sleep 7                  # longer than a heartbeat lease (5 s by default)
touch "$TMP/release"
for n in a b; do
    pid=PID_$n
    wait_exit 30 "${!pid}"
    assert_rc "$n" 0
    if grep -q "a node left\|re-forming" "$TMP/$n.err"; then dump "$n"; die "$n restarted"; fi
    assert_eq "$(grep -c "started 1 worker" "$TMP/$n.err")" 1 "$n's workers started once"
done
echo "one of three etcd members killed under a running job: nothing noticed, exit 0"
