#!/usr/bin/env bash
# --local-ranks-filter=0 with --tee=3: the console shows only local rank
# 0's lines (prefixed); the log files still get both ranks' lines.
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

N=50 LEN=200
mkdir -p "$TMP/rec"
W_REC=$TMP/rec W_LINES=$N W_LINE_LEN=$LEN start_ddprun a --standalone --nproc-per-node=2 \
    --tee=3 --local-ranks-filter=0 --log-dir "$TMP/logs" --no-python "$WORKERS/worker.sh"
wait_exit 20 "$PID_a"
assert_rc a 0
run_id=$(field "$(records | head -n1)" TORCHELASTIC_RUN_ID)
dir=$(echo "$TMP/logs/${run_id}_"*/attempt_0)
assert_eq "$(check_lines "$TMP/a.out" '\[default[0-9]+\]:' O $N $LEN | tr '\n' ' ')" "0:$N " \
    "console stdout lines per rank"
assert_eq "$(check_lines "$TMP/a.err" '\[default[0-9]+\]:' E $N $LEN | tr '\n' ' ')" "0:$N " \
    "console stderr lines per rank"
assert_no_grep "$TMP/a.out" "default1|^W1" "the console (rank 1 is filtered out)"
assert_no_grep "$TMP/a.err" "default1|^W1" "the console (rank 1 is filtered out)"
for r in 0 1; do
    assert_eq "$(check_lines "$dir/$r/stdout.log" "" O $N $LEN)" "$r:$N" "rank $r's stdout.log"
    assert_eq "$(check_lines "$dir/$r/stderr.log" "" E $N $LEN)" "$r:$N" "rank $r's stderr.log"
done
assert_no_leftovers
