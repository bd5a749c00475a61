#!/usr/bin/env bash
# timeout: 90
# Fuzzes the store's request parser for 20 seconds, starting from the seed
# corpus in tests/fuzz/seeds, and fails if libFuzzer finds a crash, a
# sanitizer report or a broken invariant. The corpus is a temporary copy so
# that a test run never changes the committed seeds; `make fuzz` is the
# long-running variant that keeps its corpus under build/fuzz/corpus.
set -u
cd "$(dirname "$0")/../.." || exit 1

bin=build/fuzz/fuzz-store-parse
if [ ! -x "$bin" ]; then
    echo "$bin is not built (it needs clang with libFuzzer: make $bin)"
    exit 77
fi

work=$(mktemp -d /tmp/ddprun-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/crashes"
cp tests/fuzz/seeds/* "$work/corpus/"

# The Makefile builds the target with recoverable UBSan checks; halting on
# the first report turns undefined behaviour into a crash with a saved input.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# -timeout and -rss_limit_mb turn a hang or a memory blow-up into a
# failure with a saved input instead of a test-runner timeout.
# -error_exitcode=1 because libFuzzer's default, 77, is what tests/run
# reads as "skipped".
"$bin" -max_total_time=20 -timeout=10 -rss_limit_mb=2048 -error_exitcode=1 -print_final_stats=1 \
    -artifact_prefix="$work/crashes/" "$work/corpus" > "$work/log" 2>&1
rc=$?

if [ $rc -ne 0 ] || [ -n "$(ls -A "$work/crashes")" ] || grep -q 'runtime error:' "$work/log"; then
    # Keep the failing inputs where they outlive this run, so that
    # `build/fuzz/fuzz-store-parse FILE` reproduces the failure.
    mkdir -p build/fuzz/crashes
    echo "fuzz_parse: the fuzzer exited with status $rc; the input that failed:"
    for f in "$work"/crashes/*; do
        [ -e "$f" ] || continue
        cp "$f" build/fuzz/crashes/
        echo "build/fuzz/crashes/$(basename "$f"):"
        od -A x -t x1z -v "$f" | head -n 20
    done
    grep -A 25 'ERROR: \|runtime error:\|deadly signal' "$work/log" | head -n 60
    exit 1
fi
tail -n 6 "$work/log"
echo "fuzz_parse: no crash in 20 s"
