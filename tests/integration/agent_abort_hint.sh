#!/usr/bin/env bash
# A torch.distributed script that exits without destroying its process
# group may abort as the interpreter ends: "terminate called without an
# active exception", SIGABRT (torch's, under torchrun alike: 9 of 40 runs
# of a gloo script with --tee 3, docs/results.md). The agent's error and the
# failure summary say what it is and what to do, after the worker's own
# last words.
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

cat > "$TMP/aborts.sh" << 'EOS'
#!/usr/bin/env bash
echo "rank $RANK done" # its last line, then the C++ runtime's words and abort()
[ "$RANK" = 1 ] || exit 0
echo "terminate called without an active exception" >&2
kill -ABRT $$
EOS
chmod +x "$TMP/aborts.sh"
start_ddprun a --standalone --nproc-per-node=2 --no-python "$TMP/aborts.sh"
wait_exit 20 "$PID_a"
assert_rc a 1
hint="a C\+\+ thread still ran as the process ended; in a torch.distributed script, the process group was not destroyed before exit \(call dist.destroy_process_group\(\) at its end\)"
assert_grep "$TMP/a.err" "error: local rank 1 \(rank 1, pid [0-9]+\) failed: Signal 6 \(SIGABRT\) received by PID [0-9]+: $hint" \
    "the agent's error"
sed -n '/^Root Cause/,$p' "$TMP/a.err" > "$TMP/root"
assert_grep "$TMP/root" "^  exitcode  : -6 " "the root cause's exit code"
assert_grep "$TMP/root" "^    terminate called without an active exception$" "the worker's last words"
assert_grep "$TMP/root" "$hint" "the hint in the summary"
assert_no_leftovers
echo "an abort at exit: $(grep -o 'failed: Signal 6.*' "$TMP/a.err" | head -n 1)"
