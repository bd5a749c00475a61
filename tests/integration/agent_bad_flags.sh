#!/usr/bin/env bash
# Bad command lines: ddprun exits 2 before doing anything, with exactly one
# line on stderr that names the offending flag (or PET_ variable).
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

# bad 'REGEX' ARGS...: ddprun ARGS must exit 2 with one stderr line
# matching REGEX, nothing on stdout.
bad() {
    local want=$1 rc
    shift
    DDPRUN_TEST_TAG=$TAG ddprun "$@" > "$TMP/out" 2> "$TMP/err" < /dev/null
    rc=$?
    echo "ddprun $*: $rc: $(cat "$TMP/err")"
    [ "$rc" = 2 ] || die "ddprun $* exited $rc, expected 2"
    assert_eq "$(wc -l < "$TMP/err")" 1 "lines on stderr for: ddprun $*"
    assert_eq "$(wc -c < "$TMP/out")" 0 "bytes on stdout for: ddprun $*"
    assert_grep "$TMP/err" "^ddprun: .*$want" "the message for: ddprun $*"
}
prog=(--no-python "$WORKERS/worker.sh")
bad "--nnodes: '3:2' has MIN greater than MAX" --nnodes=3:2 "${prog[@]}"
bad "--max-restarts: 'x' is not a non-negative integer" --max-restarts=x "${prog[@]}"
bad "unknown option '--bogus'" --bogus "${prog[@]}"
bad "--nproc-per-node: '0'" --nproc-per-node=0 "${prog[@]}"
bad "--master-port: '70000'" --master-port 70000 "${prog[@]}"
bad "--redirects: '5'" -r 5 "${prog[@]}"
bad "--rdzv-conf: store_type='file' cannot be" --rdzv-conf=store_type=file "${prog[@]}"
bad "--rdzv-conf: join_timeout='abc'" --rdzv-conf=join_timeout=abc "${prog[@]}"
bad "--node-rank: 3 " --nnodes=2 --node-rank=3 --master-addr=127.0.0.1 "${prog[@]}"
bad "--standalone.*--nnodes" --standalone --nnodes=2 "${prog[@]}"
bad "--nnodes expects a value" --nnodes
bad "'--n' is ambiguous" --n=2 "${prog[@]}"
bad "no training program" --nnodes=1
PET_NNODES=x bad "PET_NNODES: 'x'" "${prog[@]}"
# Nothing ran: no worker, no agent left.
assert_no_leftovers 1
