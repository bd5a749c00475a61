# Shared by the ddp-train scenarios: paths, a scratch directory removed on
# exit, and skipping when the trainer is not built.
set -euo pipefail
ROOT=${DDPRUN_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BIN=$ROOT/build/bin
export PATH=$BIN:$PATH
[ -x "$BIN/ddp-train" ] || { echo "skipped: ddp-train is not built"; exit 77; }
SCRATCH=$(mktemp -d /tmp/ddp-train-test.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$SCRATCH"
}
trap cleanup EXIT
# Small, quick runs: Fashion-MNIST, ResNet-20, one thread per rank.
TRAIN_ARGS=(--model resnet20 --data fashion-mnist --threads 1 --no-eval --log-every 1000)
# Debian's python3 (with numpy) unless TEST_PY names another, as on a GPU
# machine whose python3 is a virtual environment's (scripts/gpu-run).
TEST_PY=${TEST_PY:-/usr/bin/python3}
compare() { "$TEST_PY" "$ROOT/tests/tools/ckpt_compare.py" "$@"; }
have_numpy() { "$TEST_PY" -c 'import numpy' 2>/dev/null; }
# A port nobody listens on, below the kernel's ephemeral range (32768 and
# up), where a client connection's own port could take it before ddprun binds.
free_port() { "$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo "$TEST_PY")" -c '
import random, socket
for _ in range(200):
    p = random.randrange(20000, 32768)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()'; }

# The kill-and-resume scenarios: one ddp-train rank under ddprun (one
# restart allowed) with the caller's ${train[@]}, its --ckpt-dir
# $SCRATCH/NAME and its log $SCRATCH/NAME.log; the agent's pid is added to
# PIDS. clean_then_killed runs "clean" to its end, then starts "killed" and
# sets AGENT to its agent.
run_one_rank() { # NAME
    ddprun --standalone --nproc-per-node 1 --max-restarts 1 --no-python \
        ddp-train "${train[@]}" --ckpt-dir "$SCRATCH/$1" > "$SCRATCH/$1.log" 2>&1 &
    PIDS+=($!)
}
clean_then_killed() {
    run_one_rank clean
    wait "${PIDS[-1]}" || { echo "FAIL: the clean run failed"; tail -n 20 "$SCRATCH/clean.log"; exit 1; }
    run_one_rank killed
    AGENT=${PIDS[-1]}
}
# The pid of the worker of global rank RANK among the children of the
# agents AGENT... (their environments say RANK); empty if none.
worker_of_rank() { # RANK AGENT...
    local rank=$1 a p
    shift
    for a in "$@"; do
        for p in $(ps --ppid "$a" -o pid=); do
            [ "$(tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | sed -n 's/^RANK=//p')" = "$rank" ] &&
                { echo "$p"; return; }
        done
    done
}
# A variable of process PID's environment.
env_of() { tr '\0' '\n' < "/proc/$1/environ" | sed -n "s/^$2=//p"; }

# two_nodes NAME NPROC DIR0 DIR1 [ddp-train args...]: a job of two ddprun
# agents on this host (c10d on loopback, run id NAME), NPROC workers each,
# each node its own --ckpt-dir, with TRAIN's arguments (an array the
# scenario sets) and the ones given; logs in $SCRATCH/NAME.<node>.log. With
# NODE1_WRAP (an array) set, node 1's ddprun runs under it (a mount
# namespace, say). Fails the scenario if either agent exits non-zero.
two_nodes() {
    local name=$1 nproc=$2 d0=$3 d1=$4 p i dir wrap
    shift 4
    p=$(free_port)
    PIDS=()
    for i in 0 1; do
        dir=$d0 wrap=()
        [ $i = 1 ] && dir=$d1 wrap=(${NODE1_WRAP[@]+"${NODE1_WRAP[@]}"})
        "${wrap[@]}" ddprun --nnodes=2 --nproc-per-node="$nproc" --rdzv-backend=c10d \
            --rdzv-endpoint="127.0.0.1:$p" --rdzv-id="$name" --node-rank="$i" --no-python \
            ddp-train "${TRAIN[@]}" --ckpt-dir "$dir" "$@" > "$SCRATCH/$name.$i.log" 2>&1 &
        PIDS+=($!)
    done
    local rc=0
    for p in "${PIDS[@]}"; do wait "$p" || rc=1; done
    [ $rc = 0 ] || { echo "FAIL: job $name failed"; tail -n 20 "$SCRATCH/$name".*.log; exit 1; }
}
