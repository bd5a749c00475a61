#!/usr/bin/env bash
# timeout: 300
# make check's fault campaign with the rendezvous on a cluster of three
# etcd members instead of node 0's c10d store (tests/chaos/chaos.py
# --store etcd): fixed seeds, every class at least once (--cover), on the
# network test bed where root can make one (--net: one member on each
# node's host, so a lost host takes its member with it), store-lost (a
# member killed) among the classes. Judged by the same oracle as
# chaos_short.sh. make chaos-etcd and make bench-chaos-campaign
# CHAOS_STORE=etcd run longer ones.
set -euo pipefail
ROOT=${DDPRUN_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -x "$ROOT/build/bin/ddp-train" ] || { echo "skipped: ddp-train is not built"; exit 77; }
command -v cc > /dev/null || { echo "skipped: no C compiler for bench/slow_fsync.c"; exit 77; }
command -v etcd > /dev/null || { echo "skipped: etcd is not installed (Debian's etcd-server)"; exit 77; }
exec /usr/bin/python3 "$ROOT/tests/chaos/chaos.py" --seed 2 --runs "${CHAOS_CHECK_RUNS:-15}" --cover \
    --net --store etcd
