#!/usr/bin/env bash
# --redirects=3 (no tee): the workers' stdout and stderr go to
# <log dir>/<run id>_<random>/attempt_0/<local rank>/{stdout,stderr}.log, whole and
# in order, and not to the console.
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

N=100 LEN=3000
mkdir -p "$TMP/rec"
W_REC=$TMP/rec W_LINES=$N W_LINE_LEN=$LEN start_ddprun a --standalone --nproc-per-node=2 -r 3 \
    --log-dir "$TMP/logs" --no-python "$WORKERS/worker.sh"
wait_exit 20 "$PID_a"
assert_rc a 0
run_id=$(field "$(records | head -n1)" TORCHELASTIC_RUN_ID)
dir=$(echo "$TMP/logs/${run_id}_"*/attempt_0)
for r in 0 1; do
    [ -f "$dir/$r/stdout.log" ] && [ -f "$dir/$r/stderr.log" ] || die "no log files in $dir/$r"
    assert_eq "$(check_lines "$dir/$r/stdout.log" "" O $N $LEN)" "$r:$N" "rank $r's stdout.log"
    assert_eq "$(check_lines "$dir/$r/stderr.log" "" E $N $LEN)" "$r:$N" "rank $r's stderr.log"
    assert_grep "$dir/$r/stdout.log" "^worker rank $r of 2 started" "rank $r's stdout.log"
done
assert_eq "$(wc -c < "$TMP/a.out")" 0 "bytes of worker output on the console's stdout"
assert_no_grep "$TMP/a.err" "^(W[0-9]|\[default)" "the console's stderr"
# ddprun's own log still goes to the console.
assert_grep "$TMP/a.err" "started 2 workers" "ddprun's log"
assert_no_leftovers

# The same job run twice (a fixed --rdzv-id, the same --log-dir): a new run
# folder each time, as torchrun's <run id>_<random>, where the second run
# used to append to the first one's attempt_0 files.
for i in 1 2; do
    W_LINES=1 W_LINE_LEN=10 start_ddprun "again$i" --nnodes=1 --nproc-per-node=1 -r 3 \
        --rdzv-backend=c10d --rdzv-endpoint="127.0.0.1:$(free_port)" --rdzv-id=again \
        --log-dir "$TMP/logs2" --no-python "$WORKERS/worker.sh"
    wait_exit 20 "$LAST_PID"
    assert_rc "again$i" 0
    assert_grep "$TMP/again$i.err" "log directory set to: $TMP/logs2/again_" "run $i's log directory, said"
done
runs=("$TMP"/logs2/again_*)
assert_eq "${#runs[@]}" 2 "run folders after two runs"
for d in "${runs[@]}"; do
    assert_eq "$(grep -c "started" "$d/attempt_0/0/stdout.log")" 1 "runs logged in $d"
done
assert_no_leftovers
