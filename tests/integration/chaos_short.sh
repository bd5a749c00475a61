#!/usr/bin/env bash
# timeout: 300
# make check's fault campaign (tests/chaos/chaos.py): fixed seeds, every
# fault class at least once (--cover), each schedule judged by the oracle
# against a run never interrupted (exit 0, the final weights bit for bit,
# no process or snapshot left, at most a step redone per fault; where
# nodes joined or left, every sample of every epoch trained exactly once).
# The nodes run on a network test bed where root can make one (--net: link
# flaps and lost hosts too; chaos.py says so where it cannot). make chaos
# and make bench-chaos-campaign run longer ones.
set -euo pipefail
ROOT=${DDPRUN_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -x "$ROOT/build/bin/ddp-train" ] || { echo "skipped: ddp-train is not built"; exit 77; }
command -v cc > /dev/null || { echo "skipped: no C compiler for bench/slow_fsync.c"; exit 77; }
exec /usr/bin/python3 "$ROOT/tests/chaos/chaos.py" --seed 1 --runs "${CHAOS_CHECK_RUNS:-18}" --cover --net
