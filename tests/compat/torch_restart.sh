#!/usr/bin/env bash
# A PyTorch script restarted again and again (tests/compat/torch_restart.py,
# gloo, TORCH_PY's torch): rank 0 fails on purpose after each round's
# all-reduce until the last attempt. torch 2.x's workers put no per-attempt
# prefix on their store keys, so unless each round's workers meet in an
# empty store, a restarted round reads the addresses of the round before
# and fails ("Connection refused") or hangs (about half the restarts did,
# 2026-11-27, torch 2.15). Every round must meet: one node restarted 20
# times in a row, and two agents (one rank each) restarted 3 or 4 times on
# each rendezvous backend: c10d on loopback, static, and etcd-v3 where etcd
# is installed; each attempt's every rank reports its all-reduce, the job
# ends with exit 0 after exactly that many restarts, and nothing is left
# behind. The same with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (the round's
# rank 0 worker hosts the workers' store, as under torchrun).
# timeout: 420
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
# shellcheck source=tests/lib/torch.bash
source "$ROOT/tests/lib/torch.bash"
need_torch
export PYTHON_EXEC=$TORCH_PY
export GLOO_SOCKET_IFNAME=lo
script=$ROOT/tests/compat/torch_restart.py

# check ATTEMPTS WORLD NAME...: in the outputs of the ddpruns NAME..., every
# attempt 0..ATTEMPTS-1, every rank of WORLD, met and all-reduced
check() {
    local attempts=$1 world=$2 a r n outs=()
    shift 2
    for n in "$@"; do outs+=("$TMP/$n.out"); done
    for a in $(seq 0 $((attempts - 1))); do
        for r in $(seq 0 $((world - 1))); do
            grep -q "attempt $a: rank $r of $world: all-reduce ok" "${outs[@]}" ||
                { dump "$@"; die "attempt $a's rank $r never all-reduced (its round did not meet)"; }
        done
    done
}

# One node, 20 restarts in a row.
start_ddprun one --standalone --nproc-per-node=2 --max-restarts=20 "$script" --succeed-at 20
wait_exit 360 "$PID_one"
assert_rc one 0
check 21 2 one
assert_grep "$TMP/one.err" "restart 20 of 20" "the 20th restart"
echo "one node: 20 restarts, every round met"

# two_agents NAME RESTARTS RENDEZVOUS-FLAGS-FOR-NODE-0 -- ...-FOR-NODE-1: two
# agents of one rank each, restarted RESTARTS times
two_agents() {
    local name=$1 restarts=$2 i=0 flags=()
    shift 2
    for arg in "$@" --; do
        if [ "$arg" = -- ]; then
            start_ddprun "$name$i" --nnodes=2 --nproc-per-node=1 --max-restarts="$restarts" \
                "${flags[@]}" "$script" --succeed-at "$restarts"
            i=$((i + 1)) flags=()
        else
            flags+=("$arg")
        fi
    done
    wait_all_rc 200 0 "${name}0" "${name}1"
    check $((restarts + 1)) 2 "${name}0" "${name}1"
    echo "two agents, $name: $restarts restarts, every round met"
}
port=$(free_port)
c10d=(--rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:"$port" --rdzv-id=restart)
two_agents c10d 4 "${c10d[@]}" -- "${c10d[@]}"
port=$(free_port)
static=(--rdzv-backend=static --master-addr=127.0.0.1 --master-port="$port")
two_agents static 3 "${static[@]}" --node-rank=0 -- "${static[@]}" --node-rank=1
if command -v etcd > /dev/null; then
    # shellcheck source=tests/lib/etcd.bash
    source "$ROOT/tests/lib/etcd.bash"
    etcd_cluster 1
    etcd=(--rdzv-backend=etcd-v3 --rdzv-endpoint="$ETCD_ENDPOINTS" --rdzv-id=restart)
    two_agents etcd 3 "${etcd[@]}" -- "${etcd[@]}"
else
    echo "two agents, etcd-v3: not run (etcd is not installed: Debian's etcd-server)"
fi

# torchrun's way out of its shared store, honoured as torchrun does: with
# TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 each round's rank 0 worker hosts the
# workers' store, on a port node rank 0's agent picks, and no agent serves it
# (TORCHELASTIC_USE_AGENT_STORE=False). A script written for that works.
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
start_ddprun opt --standalone --nproc-per-node=2 --max-restarts=3 "$script" --succeed-at 3
wait_exit 120 "$PID_opt"
assert_rc opt 0
check 4 2 opt
assert_grep "$TMP/opt.err" "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: this round's rank 0 worker hosts the workers' store, on 127.0.0.1:[0-9]" "the workers' own store"
echo "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, one node: 3 restarts, every round met"
port=$(free_port)
c10d=(--rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:"$port" --rdzv-id=restart-opt)
two_agents optc10d 2 "${c10d[@]}" -- "${c10d[@]}"
unset TORCH_DISABLE_SHARE_RDZV_TCP_STORE
assert_no_leftovers
