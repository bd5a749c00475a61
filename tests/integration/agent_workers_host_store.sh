#!/usr/bin/env bash
# TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, torchrun's opt-out of its shared
# store, honoured: each round, node rank 0's agent picks a free port, and the
# round's rank 0 worker hosts the workers' store there
# (TORCHELASTIC_USE_AGENT_STORE=False, MASTER_PORT that port). ddp-train
# with two workers: rank 1 is SIGKILLed, the group restarts, meets at a new
# round's store and finishes; the workers' environment says so, and each
# round's port is logged.
# timeout: 120
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
start_ddprun job --standalone --nproc-per-node=2 --max-restarts=1 --no-python ddp-train \
    --model resnet20 --data synthetic --input-shape 3x8x8 --synthetic-size 100000 --threads 1 \
    --no-eval --batch-size 8 --max-steps 400 --log-every 1 --ckpt-dir "$TMP/ckpt" --snapshot-every 1
wait_line 60 "$TMP/job.out" " step 5/"
victim= rank0=
for p in $(tagged_pids); do
    [ "$(tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | sed -n 's/^RANK=//p')" = 1 ] && victim=$p
    [ "$(tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | sed -n 's/^RANK=//p')" = 0 ] && rank0=$p
done
[ -n "$victim" ] && [ -n "$rank0" ] || { dump job; die "the workers were not found"; }
envof() { tr '\0' '\n' < "/proc/$1/environ" | sed -n "s/^$2=//p"; }
assert_eq "$(envof "$rank0" TORCHELASTIC_USE_AGENT_STORE)" False "the workers' TORCHELASTIC_USE_AGENT_STORE"
port=$(envof "$rank0" MASTER_PORT)
assert_grep "$TMP/job.err" "this round's rank 0 worker hosts the workers' store, on 127.0.0.1:$port" \
    "the round's store, logged"
kill -KILL "$victim"
wait_exit 100 "$PID_job"
assert_rc job 0
assert_grep "$TMP/job.err" "restart 1 of 1" "the restart"
[ "$(grep -c "rank 0 worker hosts the workers' store, on 127.0.0.1:[0-9]" "$TMP/job.err")" = 2 ] ||
    { dump job; die "not one store a round"; }
assert_grep "$TMP/job.out" "^done: 400 steps" "the end of the training"
assert_no_leftovers
echo "ok: each round's rank 0 worker hosted the workers' store; restarted and finished"
