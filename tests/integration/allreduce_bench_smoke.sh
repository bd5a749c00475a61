#!/usr/bin/env bash
# ddp-allreduce-bench under ddprun, 2 ranks, once over shared memory and
# once TCP only (--no-shm), 4 KiB to 256 KiB: every run exits 0 (the bench
# checks every sum itself and exits 1 on a wrong one), and rank 0 prints
# the header and one well-formed row per size, with busbw = algbw for 2
# ranks (2(n-1)/n = 1).
# timeout: 60
source "$(dirname "$0")/../lib/agent.bash"

BENCH=${DDP_ALLREDUCE_BENCH:-$ROOT/build/bin/ddp-allreduce-bench}
[ -x "$BENCH" ] || die "$BENCH is not built (run make)"

for mode in shm tcp; do
    args=(--min-bytes 4K --max-bytes 256K --iters 5 --warmup 1)
    [ $mode = tcp ] && args+=(--no-shm)
    start_ddprun $mode --standalone --nproc-per-node=2 --no-python "$BENCH" "${args[@]}"
    wait_exit 40 "$LAST_PID"
    assert_rc $mode 0
    out=$TMP/$mode.out
    assert_grep "$out" '^ *size_bytes +time_us +algbw_GBps +busbw_GBps *$' "$mode: header"
    # One row per size, in order, four numbers each, busbw equal to algbw.
    rows=$(awk '/^ *[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ *$/ {
                if ($3 != $4) { print "busbw " $4 " != algbw " $3 > "/dev/stderr"; exit 1 }
                if ($2 <= 0) { print "time " $2 " at " $1 > "/dev/stderr"; exit 1 }
                printf "%s ", $1 }' "$out") || { dump $mode; die "$mode: a bad row"; }
    assert_eq "$rows" "4096 8192 16384 32768 65536 131072 262144 " "$mode: the sizes"
    # Exactly one header: only rank 0 prints.
    assert_eq "$(grep -c 'size_bytes' "$out")" 1 "$mode: header lines"
done
assert_no_leftovers
echo "shm and tcp: 7 sizes each, sums checked, exit 0"
