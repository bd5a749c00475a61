#!/usr/bin/env bash
# torch_ddp_agents.sh's PyTorch DDP job (two agents, two gloo workers each)
# with --store-proxy on: every worker reaches the job's store through its
# own node's agent (MASTER_ADDR=127.0.0.1, the proxy's port; the job's
# store in DDPRUN_JOB_STORE), and the job trains and agrees as before.
# timeout: 120
export STORE_PROXY=on
# shellcheck source=tests/compat/torch_ddp_agents.sh
source "$(dirname "$0")/torch_ddp_agents.sh"
for r in 0 1 2 3; do
    grep -Eq "^rank $r of 4: ok \(store 127\.0\.0\.1:[0-9]+, job store 127\.0\.0\.1:$port\)$" \
        "$TMP"/a1.out "$TMP"/a2.out || die "rank $r did not reach the store through its node's proxy"
done
for n in a1 a2; do
    assert_grep "$TMP/$n.err" "store proxy: this node's workers reach the job's store" "$n's proxy"
done
echo "through each node's proxy: ok"
