#!/usr/bin/env bash
# The elastic scenarios of the c10d tests, on the etcd-v3 backend (one etcd
# member on loopback; each scenario a job of its own --rdzv-id):
#  - scale-up: three agents (--nnodes=2:4) run; a fourth is admitted, the
#    group restarts with WORLD_SIZE 4 without spending a restart;
#  - scale-down: kill -9 of one agent of three; the two survivors re-form
#    with WORLD_SIZE 4 (from 6), restart count still 0, and exit 0;
#  - last call: two agents of --nnodes=2:3 start their group once the last
#    call (1 s) is over;
#  - a spare: the third agent of --nnodes=1:2 stands by, and leaves with
#    exit 0 when the job it was not needed for has finished; `ddprun status`
#    shows it standing by, and then the job finished (etcd keeps the keys).
# timeout: 150
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
# shellcheck source=tests/lib/etcd.bash
source "$(dirname "$0")/../lib/etcd.bash"
etcd_cluster 1
EP=$ETCD_ENDPOINTS
mkdir -p "$TMP/rec"

job() { # ID NAME HOLD ARGS...: one agent of job ID, its workers holding while HOLD
    local id=$1 name=$2 hold=$3
    shift 3
    W_REC=$TMP/rec W_HOLD=$hold W_HOLD_MAX=40 \
        start_ddprun "$name" --rdzv-backend=etcd-v3 --rdzv-endpoint="$EP" --rdzv-id="$id" \
        --log-dir "$TMP/logs-$name" "$@" --no-python "$WORKERS/worker.sh"
}
of_job() { records | grep " TORCHELASTIC_RUN_ID=$1 "; }

# --- scale-up ---------------------------------------------------------------
up() { job up "$1" '[ "$GROUP_WORLD_SIZE" -lt 4 ]' --nnodes=2:4 --nproc-per-node=1 \
    --rdzv-conf=last_call_timeout=1; }
up u1; up u2; up u3
three() { [ "$(of_job up | grep -c ' GROUP_WORLD_SIZE=3 ')" -ge 3 ]; }
wait_for 20 "a group of 3 nodes to run" three
t0=$(now_ms)
up u4
for n in u1 u2 u3 u4; do
    pid=PID_$n
    wait_exit 20 "${!pid}"
    assert_rc "$n" 0
done
echo "scale-up: the 4th agent was admitted and the job finished in $(($(now_ms) - t0)) ms"
final=$(of_job up | grep ' GROUP_WORLD_SIZE=4 ')
assert_eq "$(wc -l <<< "$final")" 4 "workers in the group of 4"
assert_eq "$(sed -n 's/.* RANK=\([0-9]*\) .*/\1/p' <<< "$final" | sort | tr '\n' ' ')" "0 1 2 3 " \
    "ranks of the group of 4"
assert_eq "$(of_job up | grep -vc ' TORCHELASTIC_RESTART_COUNT=0 ')" 0 \
    "scale-up workers with TORCHELASTIC_RESTART_COUNT other than 0"
assert_grep "$TMP/u1.err" "waiting to join|membership changed" "u1's log of the scale-up"

# --- scale-down -------------------------------------------------------------
down() { job down "$1" '[ "$GROUP_WORLD_SIZE" -ge 3 ]' --nnodes=2:3 --nproc-per-node=2 \
    --rdzv-conf=last_call_timeout=5; }
down d1; down d2; down d3
six() { [ "$(of_job down | grep -c ' WORLD_SIZE=6 ')" -ge 6 ]; }
wait_for 20 "a group of 3 nodes (6 workers) to run" six
t0=$(now_ms)
kill -KILL "$PID_d3"
for n in d1 d2; do
    pid=PID_$n
    wait_exit 30 "${!pid}"
    assert_rc "$n" 0
done
echo "scale-down: the survivors re-formed and finished in $(($(now_ms) - t0)) ms"
final=$(of_job down | grep ' GROUP_WORLD_SIZE=2 ')
assert_eq "$(wc -l <<< "$final")" 4 "workers in the group of 2 nodes"
assert_eq "$(grep -c ' WORLD_SIZE=4 ' <<< "$final")" 4 "WORLD_SIZE after the shrink"
assert_eq "$(of_job down | grep -vc ' TORCHELASTIC_RESTART_COUNT=0 ')" 0 \
    "scale-down workers with TORCHELASTIC_RESTART_COUNT other than 0"
assert_grep "$TMP/d1.err" "node left|membership changed" "d1's log of the shrink"

# --- last call --------------------------------------------------------------
t0=$(now_ms)
for n in l1 l2; do job last "$n" false --nnodes=2:3 --nproc-per-node=1 \
    --rdzv-conf=last_call_timeout=1; done
for n in l1 l2; do
    pid=PID_$n
    wait_exit 20 "${!pid}"
    assert_rc "$n" 0
done
ms=$(($(now_ms) - t0))
assert_eq "$(of_job last | grep -c ' WORLD_SIZE=2 ')" 2 "workers of the 2 of 2..3 nodes"
[ "$ms" -ge 900 ] || die "the group of 2 of --nnodes=2:3 ran after $ms ms, before the 1 s last call"
echo "last call: 2 of 2..3 nodes ran after the last call, $ms ms"

# --- a spare ----------------------------------------------------------------
spare() { job spare "$1" "[ ! -e $TMP/spare-go ]" --nnodes=1:2 --nproc-per-node=1; }
spare s1; spare s2
two() { [ "$(of_job spare | grep -c ' WORLD_SIZE=2 ')" -ge 2 ]; }
wait_for 20 "a group of 2 to run" two
spare s3
wait_line 20 "$TMP/s3.err" "standing by as a spare"
js() { python3 -c 'import json,sys; j=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
st() { ddprun status --rdzv-backend=etcd-v3 --rdzv-endpoint="$EP" --rdzv-id=spare --json; }
want="[(False, 'rendezvous'), (True, 'running'), (True, 'running')]"
shown() { [ "$(st | js 'sorted((n["member"], (n["status"] or {}).get("state")) for n in j["nodes"])')" = "$want" ]; }
wait_for 5 "ddprun status on etcd to show two members running and the spare standing by" shown
# On etcd a node's heartbeat age is its lease's (no beat/ key is written):
# whole seconds, at most the lease's 2.
assert_eq "$(st | js '[isinstance(n["heartbeat_age_s"], float) and 0 <= n["heartbeat_age_s"] <= 2 for n in j["nodes"] if n["alive"]]')" \
    "[True, True, True]" "every node's heartbeat age on etcd, from its lease"
assert_eq "$(ETCDCTL_API=3 etcdctl --endpoints "$EP" get --prefix --keys-only /ddprun/spare/beat/ | grep -c . || true)" \
    0 "beat/ keys on etcd"
touch "$TMP/spare-go"
for n in s1 s2 s3; do
    pid=PID_$n
    wait_exit 20 "${!pid}"
    assert_rc "$n" 0
done
assert_eq "$(of_job spare | wc -l)" 2 "workers of the spare's job (none of them the spare's)"
assert_grep "$TMP/s3.err" "finished without this node" "the spare's goodbye"
assert_eq "$(st | js 'j["phase"], sorted(n["status"]["state"] for n in j["nodes"])')" \
    "('finished', ['succeeded', 'succeeded', 'succeeded'])" "ddprun status of the finished job, on etcd"
echo "spare: stood by, and left with the job"
assert_no_leftovers
