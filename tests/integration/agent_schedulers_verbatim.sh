#!/usr/bin/env bash
# The way schedulers call torchrun, verbatim, with a Python script
# (tests/workers/record.py) and no --no-python:
#  - Kubeflow PyTorchJob, fixed size: two "pods" with only PET_NNODES=2,
#    PET_NODE_RANK, PET_MASTER_ADDR/PORT, PET_NPROC_PER_NODE=auto and an
#    empty PET_STANDALONE (off), plus the operator's own MASTER_ADDR,
#    MASTER_PORT, WORLD_SIZE and RANK, which the workers must see replaced
#    by torchrun's; the command is plain `torchrun train.py ARGS`.
#  - Kubeflow elastic (elasticPolicy): PET_NNODES=1:2, PET_RDZV_BACKEND,
#    PET_RDZV_ENDPOINT, PET_RDZV_ID, PET_RDZV_CONF with a key torchrun
#    does not know, PET_MAX_RESTARTS, PET_NPROC_PER_NODE=1.
#  - TorchX's dist.ddp: --rdzv_backend c10d --rdzv_endpoint localhost:0
#    --tee 3 --role "" --nnodes 1 --nproc_per_node 2 script.py.
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
python3 -c 'import os' 2> /dev/null || skip "skipped: no python3 to run the training script"
SCRIPT=$ROOT/tests/workers/record.py
mkdir -p "$TMP/rec"
cd "$TMP" || die "no temp dir"

# Kubeflow PyTorchJob without elasticPolicy.
port=$(free_port)
auto=$(nproc)
for r in 0 1; do
    W_REC=$TMP/rec PET_NNODES=2 PET_NODE_RANK=$r PET_MASTER_ADDR=localhost PET_MASTER_PORT=$port \
        PET_NPROC_PER_NODE=auto PET_STANDALONE="" MASTER_ADDR=pod-master-0 MASTER_PORT=23456 \
        WORLD_SIZE=2 RANK=$r PYTHONUNBUFFERED=1 start_ddprun "k$r" "$SCRIPT" --epochs 1
done
wait_exit 30 "$PID_k0"
assert_rc k0 0
wait_exit 30 "$PID_k1"
assert_rc k1 0
assert_eq "$(records | wc -l)" $((2 * auto)) "workers (2 pods x nproc auto = $auto CPUs)"
ranks=$(records | while read -r l; do field "$l" RANK; done | sort -n | tr '\n' ' ')
assert_eq "$ranks" "$(seq 0 $((2 * auto - 1)) | tr '\n' ' ')" "torchrun's RANKs, not the operator's"
while read -r l; do
    assert_eq "$(field "$l" WORLD_SIZE)" $((2 * auto)) "WORLD_SIZE"
    assert_eq "$(field "$l" MASTER_ADDR)" localhost "MASTER_ADDR"
    assert_eq "$(field "$l" MASTER_PORT)" "$port" "MASTER_PORT"
    assert_eq "$(field "$l" args)" "--epochs,1" "the script's arguments"
done < <(records)

# Kubeflow with elasticPolicy.
rm -f "$TMP"/rec/*
port=$(free_port)
for r in 0 1; do
    W_REC=$TMP/rec PET_NNODES=1:2 PET_RDZV_BACKEND=c10d PET_RDZV_ENDPOINT=127.0.0.1:$port \
        PET_RDZV_ID=pytorchjob-elastic PET_RDZV_CONF="join_timeout=60,heartbeat_timeout=5,rdzv_mode=x" \
        PET_MAX_RESTARTS=3 PET_NPROC_PER_NODE=1 start_ddprun "e$r" "$SCRIPT"
done
wait_exit 40 "$PID_e0"
assert_rc e0 0
wait_exit 40 "$PID_e1"
assert_rc e1 0
assert_eq "$(records | wc -l)" 2 "elastic workers"
while read -r l; do
    assert_eq "$(field "$l" WORLD_SIZE)" 2 "elastic WORLD_SIZE"
    assert_eq "$(field "$l" TORCHELASTIC_RUN_ID)" pytorchjob-elastic "TORCHELASTIC_RUN_ID"
    assert_eq "$(field "$l" TORCHELASTIC_MAX_RESTARTS)" 3 "TORCHELASTIC_MAX_RESTARTS"
done < <(records)
assert_grep "$TMP/e0.err" "unknown key 'rdzv_mode' ignored" "the unknown rdzv_conf key, warned"

# TorchX dist.ddp, its command line as it writes it.
rm -f "$TMP"/rec/*
W_REC=$TMP/rec start_ddprun x --rdzv_backend c10d --rdzv_endpoint localhost:0 --tee 3 --role "" \
    --nnodes 1 --nproc_per_node 2 "$SCRIPT"
wait_exit 30 "$PID_x"
assert_rc x 0
assert_grep "$TMP/x.out" "^\[0\]:python worker rank 0 of 2$" "rank 0's line, prefixed"
assert_grep "$TMP/x.out" "^\[1\]:python worker rank 1 of 2$" "rank 1's line, prefixed"
assert_eq "$(records | wc -l)" 2 "TorchX workers"
echo "Kubeflow (fixed and elastic) and TorchX command lines: run as under torchrun"
