#!/usr/bin/env bash
# ddprun --standalone with 4 workers: every worker gets torchrun's
# environment (ranks 0..3 once each, world sizes, the agent's store as
# MASTER_ADDR:MASTER_PORT, answering while the workers run, error files
# under the log directory), and ddprun exits 0 once they all do.
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec" "$TMP/logs"
W_REC=$TMP/rec W_HOLD="[ ! -e $TMP/go ]" \
    start_ddprun a --standalone --nproc-per-node=4 --log-dir "$TMP/logs" \
    --no-python "$WORKERS/worker.sh"

wait_for 15 "4 workers to start" nrecords_at_least 4
port=$(field "$(records | head -n1)" MASTER_PORT)
addr=$(field "$(records | head -n1)" MASTER_ADDR)
# The store the workers are told about answers while they run.
ddprun-store-cli --host "$addr" --port "$port" ping > "$TMP/ping" 2>&1 ||
    { cat "$TMP/ping" >&2; die "MASTER_ADDR:MASTER_PORT ($addr:$port) does not answer a ping"; }
ddprun-store-cli --host "$addr" --port "$port" set test/key v > /dev/null ||
    die "cannot set a key in the agent's store"
touch "$TMP/go"
wait_exit 15 "$PID_a"
assert_rc a 0

records > "$TMP/all"
cat "$TMP/all"
assert_eq "$(wc -l < "$TMP/all")" 4 "worker starts"
assert_eq "$(for l in $(sed -n 's/.* RANK=\([0-9]*\) .*/\1/p' "$TMP/all"); do echo "$l"; done | sort | tr '\n' ' ')" \
    "0 1 2 3 " "the workers' RANKs"
run_id=$(field "$(head -n1 "$TMP/all")" TORCHELASTIC_RUN_ID)
[ -n "$run_id" ] && [ "$run_id" != none ] || die "--standalone should make a run id, got '$run_id'"
while read -r line; do
    rank=$(field "$line" RANK)
    assert_eq "$(field "$line" LOCAL_RANK)" "$rank" "LOCAL_RANK of rank $rank"
    assert_eq "$(field "$line" ROLE_RANK)" "$rank" "ROLE_RANK of rank $rank"
    for kv in GROUP_RANK=0 ROLE_NAME=default LOCAL_WORLD_SIZE=4 WORLD_SIZE=4 \
        GROUP_WORLD_SIZE=1 ROLE_WORLD_SIZE=4 MASTER_ADDR=$addr MASTER_PORT=$port \
        TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 TORCHELASTIC_RUN_ID=$run_id \
        TORCHELASTIC_USE_AGENT_STORE=True TORCH_NCCL_ASYNC_ERROR_HANDLING=1 OMP_NUM_THREADS=1; do
        assert_eq "$(field "$line" "${kv%%=*}")" "${kv#*=}" "${kv%%=*} of rank $rank"
    done
    # torchrun's layout: <log dir>/<run id>_<random>/attempt_<restart>/<local rank>/error.json
    assert_eq "$(field "$line" TORCHELASTIC_ERROR_FILE)" \
        "$(echo "$TMP/logs/${run_id}_"*)/attempt_0/$rank/error.json" "TORCHELASTIC_ERROR_FILE of rank $rank"
done < "$TMP/all"
# The console got each worker's own line.
for r in 0 1 2 3; do assert_grep "$TMP/a.out" "^worker rank $r of 4 started" "console output"; done
assert_no_leftovers
echo "4 workers, torchrun's environment, store at $addr:$port, exit 0"
