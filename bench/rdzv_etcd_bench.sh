#!/usr/bin/env bash
# The etcd-v3 rendezvous against ours on c10d and against torchrun's etcd
# backend (Debian's PyTorch 1.13, which speaks etcd's v2 API: the etcd here
# runs with --enable-v2), in one run on loopback: N agents (--nnodes=N,
# --nproc-per-node=1, /bin/true as the worker, --no-python on every side),
# seconds from launching them all to the last exit, median of REPS runs,
# each capped at CAP seconds. Targets: etcd-v3 at most 1/10 of torchrun's
# etcd time and within 2x of our c10d. Environment: REPS (3), SIZES
# ("2 8 32"), CAP (120), TORCHRUN (1; 0 leaves torchrun's column out, for
# quick checks of ours alone). Run with `make bench-rdzv-etcd`.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
DDPRUN=$ROOT/build/bin/ddprun
PY=/usr/bin/python3
REPS=${REPS:-3}
SIZES=${SIZES:-2 8 32}
CAP=${CAP:-120}
STD=(--redirects 2 --tee 1) # torch 1.13's torchrun on Python 3.11 needs both
unset DDPRUN_STORE_TOKEN OMP_NUM_THREADS
for v in $(env | sed -n 's/^\(PET_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
TMP=$(mktemp -d /tmp/ddprun-etcd-bench.XXXXXX)
PIDS=()
ETCD_PID=
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2> /dev/null; done
    [ -n "$ETCD_PID" ] && kill -TERM "$ETCD_PID" 2> /dev/null && wait "$ETCD_PID" 2> /dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
# shellcheck source=bench/lib.bash
. "$ROOT/bench/lib.bash"

[ -x "$DDPRUN" ] || { echo "bench-rdzv-etcd: $DDPRUN is not built (run make)" >&2; exit 1; }
command -v etcd > /dev/null || { echo "bench-rdzv-etcd: needs etcd (apt install etcd-server)" >&2; exit 1; }
TORCH=${TORCHRUN:-1}
[ "$TORCH" = 1 ] && { "$PY" -c 'import torch.distributed.run, etcd' 2> /dev/null || TORCH=0; }

cport=$(free_port)
pport=$(free_port)
etcd --name b --data-dir "$TMP/etcd" --enable-v2 \
    --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "b=http://127.0.0.1:$pport" > "$TMP/etcd.log" 2>&1 &
ETCD_PID=$!
for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$cport" endpoint health > /dev/null 2>&1 && break
    sleep 0.1
done
EP=127.0.0.1:$cport

echo "ddprun etcd rendezvous benchmark: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), $(date -u '+%Y-%m-%d %H:%M UTC'), $(etcd --version | head -n1)"
[ "${TORCHRUN:-1}" = 0 ] && echo "(TORCHRUN=0: the torchrun column is left out)"
[ "${TORCHRUN:-1}" = 1 ] && [ $TORCH = 0 ] && echo "(torch or python3-etcd is not importable by $PY: the torchrun column is skipped)"
echo
echo "N agents (--nnodes=N, 1 worker each, /bin/true), launch -> last exit (median of $REPS; seconds)"
printf '  %6s %12s %12s %14s %16s %16s\n' agents "ours etcd" "ours c10d" "torchrun etcd" "etcd/torchrun" "etcd/c10d"
for n in $SIZES; do
    a=$(BACKEND=etcd-v3 ENDPOINT=$EP agents "ddprun etcd-v3" "$n" "$DDPRUN" -- --no-python /bin/true)
    b=$(agents "ddprun c10d" "$n" "$DDPRUN" -- --no-python /bin/true)
    c=n/a
    [ $TORCH = 1 ] && c=$(BACKEND=etcd ENDPOINT=$EP agents "torchrun etcd" "$n" "$PY" -m torch.distributed.run \
        --monitor_interval 0.1 -- --no_python /bin/true)
    printf '  %6s %12s %12s %14s %16s %16s\n' "$n" "$(fmt "$a")" "$(fmt "$b")" "$(fmt "$c")" \
        "$(ratio "$a" "$c")" "$(ratio "$a" "$b")"
done
echo "  (targets: etcd/torchrun <= 0.1, etcd/c10d <= 2)"
