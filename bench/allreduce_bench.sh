#!/usr/bin/env bash
# The all-reduce benchmark (`make bench-allreduce`): ddp-allreduce-bench
# (our CPU communicator: shared memory between the ranks of this host; its
# buffer from comm_alloc, which the ranks read in place, as ddp-train's
# gradients; also with --own-memory at 25 MiB, a malloc'd buffer copied
# through shared memory)
# against torch.distributed's gloo backend (bench/gloo_allreduce.py, Debian's
# torch), both started by ddprun with 2 and then 4 ranks on this machine, in
# the same run, taking turns, because these machines are shared and noisy
# and only the ratio means anything.
#
# For each rank count:
#   1. The two headline sizes, 4 KiB (latency) and 25 MiB (bandwidth, a
#      typical DDP gradient bucket): BENCH_ROUNDS runs of each program,
#      alternating, and the median time of each.
#   2. The full table, 4 KiB to BENCH_MAX_BYTES doubling: BENCH_TABLE_ROUNDS
#      runs of each (median per size).
#   3. CPU time per 25 MiB all-reduce, summed over the ranks: the user+sys
#      time of a run of 70 all-reduces less that of a run of 10, over 60.
#      Other programs' load changes how much CPU each side gets, and so the
#      times above, far more than it changes this.
# Both programs check the sum at every size before timing it and exit 1 on
# a wrong result, which fails this script.
#
# Prints Markdown for docs/results.md. Targets (reported, not asserted; the
# exit status is 0 unless a run failed): our bus bandwidth at 25 MiB >= 3x
# gloo's, our time at 4 KiB <= 1/10 of gloo's.
# Environment: BENCH_ROUNDS (default 5), BENCH_TABLE_ROUNDS (default 1),
# BENCH_MAX_BYTES (default 128M), BENCH_RANKS (default "2 4"),
# DDP_ALLREDUCE_BENCH (default build/bin/ddp-allreduce-bench).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DDPRUN=$ROOT/build/bin/ddprun
OURS=${DDP_ALLREDUCE_BENCH:-$ROOT/build/bin/ddp-allreduce-bench}
GLOO=$ROOT/bench/gloo_allreduce.py
PY=/usr/bin/python3
ROUNDS=${BENCH_ROUNDS:-5}
TABLE_ROUNDS=${BENCH_TABLE_ROUNDS:-1}
MAX=${BENCH_MAX_BYTES:-128M}
RANKS=${BENCH_RANKS:-2 4}
TMP=$(mktemp -d /tmp/ddprun-allreduce-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# A token would make the agents' stores demand a handshake torch cannot make;
# inherited launcher settings would change the runs.
unset DDPRUN_STORE_TOKEN OMP_NUM_THREADS PYTHON_EXEC
for v in $(env | sed -n 's/^\(PET_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done

die() { echo "allreduce_bench: $*" >&2; exit 1; }

for f in "$DDPRUN" "$OURS"; do [ -x "$f" ] || die "$f is not built (run make)"; done
"$PY" -c 'import torch.distributed' 2>/dev/null ||
    die "torch is not importable by $PY (apt install python3-torch); it is the peer compared with"

# run NAME N OUT ARGS...: one run of ours or gloo with N ranks; the result
# rows (size_bytes time_us algbw busbw) go to OUT.
run() {
    local name=$1 n=$2 out=$3 rc
    shift 3
    if [ "$name" = ours ] || [ "$name" = ours_own ]; then
        [ "$name" = ours_own ] && set -- "$@" --own-memory
        timeout 900 "$DDPRUN" --standalone --nproc-per-node "$n" --no-python "$OURS" "$@" \
            > "$TMP/run.out" 2> "$TMP/run.err"
    else
        PYTHON_EXEC=$PY timeout 900 "$DDPRUN" --standalone --nproc-per-node "$n" "$GLOO" "$@" \
            > "$TMP/run.out" 2> "$TMP/run.err"
    fi
    rc=$?
    if [ $rc -ne 0 ]; then
        tail -n 20 "$TMP/run.out" "$TMP/run.err" >&2
        die "$name with $n ranks failed (exit $rc)"
    fi
    grep -E '^ *[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ *$' "$TMP/run.out" > "$out"
    [ -s "$out" ] || { cat "$TMP/run.out" "$TMP/run.err" >&2; die "$name printed no results"; }
}

# cpu_ms NAME N: CPU milliseconds (user + sys, all processes) per 25 MiB
# all-reduce, from runs of 10 and 70 timed iterations. (bash's `times` in
# a subshell: its children's times include everything ddprun waited for.)
cpu_ms() {
    local name=$1 n=$2 it t10 t70
    for it in 10 70; do
        (
            if [ "$name" = ours ]; then
                timeout 900 "$DDPRUN" --standalone --nproc-per-node "$n" --no-python "$OURS" \
                    --min-bytes 25M --max-bytes 25M --warmup 0 --iters $it > /dev/null 2>&1
            else
                PYTHON_EXEC=$PY timeout 900 "$DDPRUN" --standalone --nproc-per-node "$n" "$GLOO" \
                    --min-bytes 25M --max-bytes 25M --warmup 0 --iters $it > /dev/null 2>&1
            fi || exit 1
            times > "$TMP/times"
        ) || die "$name: the CPU-time run with $n ranks failed"
        # Second line: children's "XmY.YYYs XmY.YYYs" (user, sys).
        printf -v "t$it" %s "$(sed -n 2p "$TMP/times" | tr 'ms' '  ' |
            awk '{print $1 * 60 + $2 + $3 * 60 + $4}')"
    done
    awk -v a="$t10" -v b="$t70" 'BEGIN { printf "%.1f", (b - a) / 60 * 1000 }'
}

# median FILES...: per size, the median time over the files' rows; prints
# "size time_us".
median() {
    cat "$@" | awk '{print $1, $2}' | sort -k1,1n -k2,2g | awk '
        { t[$1] = t[$1] " " $2; n[$1]++ }
        END { for (s in t) { split(substr(t[s], 2), v, " "); m = n[s];
              med = (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2;
              print s, med } }' | sort -k1,1n
}

busbw() { # size time_us n
    awk -v s="$1" -v t="$2" -v n="$3" 'BEGIN { printf "%.3f", s / (t * 1e-6) / 1e9 * 2 * (n - 1) / n }'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }

model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
echo "## All-reduce (issue: worker runtime)"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "- machine: $(nproc) CPUs ($model), $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) RAM, Linux $(uname -r); load average $(cut -d' ' -f1-3 /proc/loadavg) when the run started"
echo "- command: \`make bench-allreduce\` (bench/allreduce_bench.sh; BENCH_ROUNDS=$ROUNDS, BENCH_TABLE_ROUNDS=$TABLE_ROUNDS)"
echo "- ours: \`ddprun --standalone --nproc-per-node N --no-python build/bin/ddp-allreduce-bench\` (shared memory, the buffer a shared window from comm_alloc that the ranks read in place, as ddp-train's gradients); gloo: \`ddprun --standalone --nproc-per-node N bench/gloo_allreduce.py\` (torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null), gloo over loopback TCP)"
echo "- placement: with more ranks than CPUs (4 ranks here), both programs bind rank r to CPU r mod $(nproc), as" '`mpirun --bind-to core`' "would (each has --no-bind); with 2 ranks neither binds"
echo "- time: one in-place all-reduce of fp32 sums, the mean over ranks of each rank's mean over the timed iterations; busbw = algbw * 2(n-1)/n as nccl-tests; each figure the median of the runs, the programs taking turns"
echo

for n in $RANKS; do
    for i in $(seq "$ROUNDS"); do
        for who in ours gloo; do
            run "$who" "$n" "$TMP/h_${who}_${n}_4k_$i" --min-bytes 4K --max-bytes 4K
            run "$who" "$n" "$TMP/h_${who}_${n}_25m_$i" --min-bytes 25M --max-bytes 25M
        done
        run ours_own "$n" "$TMP/h_ours_own_${n}_25m_$i" --min-bytes 25M --max-bytes 25M
    done
    for i in $(seq "$TABLE_ROUNDS"); do
        for who in ours gloo; do run "$who" "$n" "$TMP/t_${who}_${n}_$i" --max-bytes "$MAX"; done
    done
done

echo "Headline (median of $ROUNDS runs each):"
echo
echo "| ranks | size | ours time µs | gloo time µs | time gloo/ours | ours busbw GB/s | gloo busbw GB/s | busbw ours/gloo | target |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
for n in $RANKS; do
    for sz in 4k 25m; do
        o=$(median "$TMP"/h_ours_"${n}"_${sz}_*) g=$(median "$TMP"/h_gloo_"${n}"_${sz}_*)
        size=${o%% *} ot=${o#* } gt=${g#* }
        ob=$(busbw "$size" "$ot" "$n") gb=$(busbw "$size" "$gt" "$n")
        # Same size and rank count: the busbw ratio is the time ratio (from
        # the unrounded times, not the printed bandwidths).
        lat=$(ratio "$gt" "$ot") bw=$lat
        if [ $sz = 4k ]; then
            verdict=$(awk -v r="$lat" 'BEGIN { print (r >= 10) ? "time <= 1/10 gloo: PASS" : "time <= 1/10 gloo: not met" }')
            label="4 KiB"
        else
            verdict=$(awk -v r="$bw" 'BEGIN { print (r >= 3) ? "busbw >= 3x gloo: PASS" : "busbw >= 3x gloo: not met" }')
            label="25 MiB"
        fi
        echo "| $n | $label | $ot | $gt | ${lat}x | $ob | $gb | ${bw}x | $verdict |"
    done
done
echo
echo "25 MiB from a caller's own (malloc'd) buffer, \`--own-memory\`: copied through shared memory (median of $ROUNDS runs):"
echo
echo "| ranks | ours own-memory time µs | gloo time µs | time gloo/ours | ours shared-window time µs | own/shared |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
for n in $RANKS; do
    o=$(median "$TMP"/h_ours_own_"${n}"_25m_*) g=$(median "$TMP"/h_gloo_"${n}"_25m_*)
    w=$(median "$TMP"/h_ours_"${n}"_25m_*)
    echo "| $n | ${o#* } | ${g#* } | $(ratio "${g#* }" "${o#* }")x | ${w#* } | $(ratio "${o#* }" "${w#* }")x |"
done
echo
echo "CPU time per 25 MiB all-reduce, all ranks together (user + sys; (70 runs - 10 runs) / 60):"
echo
echo "| ranks | ours CPU ms | gloo CPU ms | gloo/ours |"
echo "| ---: | ---: | ---: | ---: |"
for n in $RANKS; do
    oc=$(cpu_ms ours "$n") gc=$(cpu_ms gloo "$n")
    echo "| $n | $oc | $gc | $(ratio "$gc" "$oc")x |"
done
echo
for n in $RANKS; do
    [ "$TABLE_ROUNDS" -gt 0 ] || break
    echo "Full table, $n ranks (median of $TABLE_ROUNDS run(s) per size):"
    echo
    echo "| size bytes | ours time µs | ours busbw GB/s | gloo time µs | gloo busbw GB/s | busbw ours/gloo |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
    median "$TMP"/t_ours_"${n}"_* > "$TMP/mo"
    median "$TMP"/t_gloo_"${n}"_* > "$TMP/mg"
    awk 'NR == FNR { g[$1] = $2; next } ($1 in g) { print $1, $2, g[$1] }' "$TMP/mg" "$TMP/mo" |
    while read -r size ot gt; do
        ob=$(busbw "$size" "$ot" "$n") gb=$(busbw "$size" "$gt" "$n")
        echo "| $size | $ot | $ob | $gt | $gb | $(ratio "$gt" "$ot")x |"
    done
    echo
done
