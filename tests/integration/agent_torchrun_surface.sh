#!/usr/bin/env bash
# torchrun's surface as schedulers use it: TorchX's `--role ""` is taken
# (the workers see an empty ROLE_NAME and the console prefix "[0]:");
# --rdzv-conf keys torchrun knows are taken and one it does not know is
# ignored with a warning naming it (Kubeflow passes whatever the user
# wrote); a user's TORCH_NCCL_ASYNC_ERROR_HANDLING and
# NCCL_ASYNC_ERROR_HANDLING reach the workers unchanged (torchrun only
# sets defaults), and the defaults are 1; --virtual-local-rank gives every
# worker LOCAL_RANK=0 and only its own GPU (the agent's
# CUDA_VISIBLE_DEVICES entry for its local rank).
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
W_REC=$TMP/rec TORCH_NCCL_ASYNC_ERROR_HANDLING=3 NCCL_ASYNC_ERROR_HANDLING=2 \
    start_ddprun a --standalone --nproc-per-node=1 --role "" \
    --rdzv-conf "heartbeat_timeout=6,use_libuv=1,frobnicate=1" \
    --tee 3 --no-python "$WORKERS/worker.sh"
wait_exit 15 "$PID_a"
assert_rc a 0
line=$(records)
assert_eq "$(field "$line" ROLE_NAME)" "" "ROLE_NAME with --role \"\""
assert_eq "$(field "$line" TORCH_NCCL_ASYNC_ERROR_HANDLING)" 3 "the user's TORCH_NCCL_ASYNC_ERROR_HANDLING"
assert_eq "$(field "$line" NCCL_ASYNC_ERROR_HANDLING)" 2 "the user's NCCL_ASYNC_ERROR_HANDLING"
assert_grep "$TMP/a.out" "^\[0\]:worker rank 0 of 1 started" "the console prefix with an empty role"
assert_grep "$TMP/a.err" "warning: --rdzv-conf: unknown key 'frobnicate' ignored" "the warning"

rm -f "$TMP"/rec/*
W_REC=$TMP/rec start_ddprun b --standalone --nproc-per-node=1 --no-python "$WORKERS/worker.sh"
wait_exit 15 "$PID_b"
assert_rc b 0
line=$(records)
assert_eq "$(field "$line" TORCH_NCCL_ASYNC_ERROR_HANDLING)" 1 "the default TORCH_NCCL_ASYNC_ERROR_HANDLING"
assert_eq "$(field "$line" NCCL_ASYNC_ERROR_HANDLING)" 1 "the default NCCL_ASYNC_ERROR_HANDLING"
assert_eq "$(field "$line" ROLE_NAME)" default "the default ROLE_NAME"
rm -f "$TMP"/rec/*
W_REC=$TMP/rec CUDA_VISIBLE_DEVICES=5,7 start_ddprun v --standalone --nproc-per-node=2 \
    --virtual-local-rank --no-python "$WORKERS/worker.sh"
wait_exit 15 "$PID_v"
assert_rc v 0
while read -r line; do
    r=$(field "$line" RANK)
    assert_eq "$(field "$line" LOCAL_RANK)" 0 "LOCAL_RANK of rank $r with --virtual-local-rank"
    assert_eq "$(field "$line" CUDA_VISIBLE_DEVICES)" "$([ "$r" = 0 ] && echo 5 || echo 7)" \
        "CUDA_VISIBLE_DEVICES of rank $r with --virtual-local-rank"
done < <(records)
echo "--role \"\", torch 2.x --rdzv-conf keys, the user's NCCL variables, --virtual-local-rank: as torchrun"
