#!/usr/bin/env bash
# The scale bench's small version (make bench-scale at N = 32), so that
# nothing in it regresses: 32 agents of one job (--nnodes 30:32) on a
# ddprun-store, then on an etcd, form; after a worker's SIGKILL every node
# restarts; after an agent's SIGKILL and another's SIGSTOP (silent: only
# the heartbeat tells) the survivors re-form; then once more on the
# ddprun-store with every agent's store proxy on and every worker doing an
# init_process_group's store requests through it (STORE_PROXY=on), in
# every round. bench/scale_bench.sh exits 1
# when a phase fails or takes longer than its cap; the times it prints are
# not judged here (benchmarks judge speed).
# timeout: 240
set -u
cd "$(dirname "$0")/../.." || exit 1
backends="c10d etcd-v3"
command -v etcd > /dev/null || { backends=c10d; echo "etcd is not installed: c10d only"; }
SIZES=32 BACKENDS=$backends TORCH_SIZES="" REST=1 CAP=60 bench/scale_bench.sh
rc=$?
[ $rc = 0 ] || { echo "FAIL: a phase of the scale bench failed or timed out (exit $rc)"; exit 1; }
STORE_PROXY=on SIZES=32 BACKENDS=c10d TORCH_SIZES="" REST=1 CAP=60 bench/scale_bench.sh
rc=$?
[ $rc = 0 ] || { echo "FAIL: with the agents' store proxies, a phase failed or timed out (exit $rc)"; exit 1; }
