#!/usr/bin/env bash
# The fault campaign (tests/chaos/chaos.py) with the rendezvous on a
# cluster of three etcd members instead of node 0's c10d store, on
# loopback: every class once (--cover), store-lost (an etcd member killed)
# among them. make chaos-etcd runs it; not yet make check, for two open
# defects it finds: on the network test bed a node's own link down for
# 0.8 s makes its etcd client give up on every member at once
# (`chaos.py --net --store etcd --replay 'link-flap@1:final'`), and a
# preemption during a restart can leave the requeued job's agents waiting
# (seed 2, schedule 5: `--replay` of its shrunk spec). It found a requeued job
# standing by for ever as spares of its dead predecessor's round, and a
# joiner killed while it joined holding every member for 30 s, then
# failing them.
set -euo pipefail
ROOT=${DDPRUN_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -x "$ROOT/build/bin/ddp-train" ] || { echo "skipped: ddp-train is not built"; exit 77; }
command -v cc > /dev/null || { echo "skipped: no C compiler for bench/slow_fsync.c"; exit 77; }
exec /usr/bin/python3 "$ROOT/tests/chaos/chaos.py" --seed 2 --runs "${CHAOS_CHECK_RUNS:-12}" --cover \
    --store etcd
