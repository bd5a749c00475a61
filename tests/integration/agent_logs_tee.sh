#!/usr/bin/env bash
# --tee=3 with two workers printing many long lines at once on stdout and
# stderr: each worker's lines land whole and in order in
# <log dir>/<run id>_<random>/attempt_0/<local rank>/{stdout,stderr}.log, and on the
# console each line is exactly one worker's line, prefixed "[default<rank>]:".
# Without --tee or --redirects the console gets the same lines, unprefixed
# and just as whole.
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

N=300 LEN=6000 # lines longer than a pipe write, so workers' writes split
mkdir -p "$TMP/rec"
W_REC=$TMP/rec W_LINES=$N W_LINE_LEN=$LEN start_ddprun tee --standalone --nproc-per-node=2 \
    --tee=3 --log-dir "$TMP/logs" --no-python "$WORKERS/worker.sh"
wait_exit 30 "$PID_tee"
assert_rc tee 0
run_id=$(field "$(records | head -n1)" TORCHELASTIC_RUN_ID)
dir=$(echo "$TMP/logs/${run_id}_"*/attempt_0)
for r in 0 1; do
    [ -f "$dir/$r/stdout.log" ] && [ -f "$dir/$r/stderr.log" ] || die "no log files in $dir/$r"
    assert_eq "$(check_lines "$dir/$r/stdout.log" "" O $N $LEN)" "$r:$N" "rank $r's stdout.log"
    assert_eq "$(check_lines "$dir/$r/stderr.log" "" E $N $LEN)" "$r:$N" "rank $r's stderr.log"
    assert_grep "$dir/$r/stdout.log" "^worker rank $r of 2 started" "rank $r's stdout.log"
done
# The console: prefixed, whole, in order, both ranks, both streams.
assert_eq "$(check_lines "$TMP/tee.out" '\[default[0-9]+\]:' O $N $LEN | tr '\n' ' ')" \
    "0:$N 1:$N " "console stdout lines per rank"
assert_eq "$(check_lines "$TMP/tee.err" '\[default[0-9]+\]:' E $N $LEN | tr '\n' ' ')" \
    "0:$N 1:$N " "console stderr lines per rank"
assert_grep "$TMP/tee.out" "^\[default0\]:worker rank 0 of 2 started" "console"
assert_grep "$TMP/tee.out" "^\[default1\]:worker rank 1 of 2 started" "console"
assert_no_grep "$TMP/tee.out" "^W" "console (an unprefixed worker line)"

# No tee, no redirect: console only, unprefixed, still whole lines.
W_LINES=$N W_LINE_LEN=$LEN start_ddprun plain --standalone --nproc-per-node=2 \
    --log-dir "$TMP/logs-plain" --no-python "$WORKERS/worker.sh"
wait_exit 30 "$PID_plain"
assert_rc plain 0
assert_eq "$(check_lines "$TMP/plain.out" "" O $N $LEN | tr '\n' ' ')" "0:$N 1:$N " \
    "console stdout lines per rank (no tee)"
assert_eq "$(check_lines "$TMP/plain.err" "" E $N $LEN | tr '\n' ' ')" "0:$N 1:$N " \
    "console stderr lines per rank (no tee)"
assert_eq "$(find "$TMP/logs-plain" -name '*.log' | wc -l)" 0 "log files without --tee/--redirects"
assert_no_leftovers
