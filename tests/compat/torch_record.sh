#!/usr/bin/env bash
# torch's @record error files under ddprun: a two-worker job whose rank 1
# raises inside a main decorated with
# torch.distributed.elastic.multiprocessing.errors.record (TORCH_PY's torch,
# see tests/lib/torch.bash). torch writes the exception to the file ddprun
# named in TORCHELASTIC_ERROR_FILE; ddprun's failure summary must take its
# root cause from that file: the message, the traceback @record recorded
# (its own wrapper frame included), and the file's timestamp.
# timeout: 60
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
# shellcheck source=tests/lib/torch.bash
source "$ROOT/tests/lib/torch.bash"
need_torch torch.distributed.elastic.multiprocessing.errors
export PYTHON_EXEC=$TORCH_PY

start_ddprun a --standalone --nproc-per-node=2 --max-restarts=0 --log-dir "$TMP/logs" \
    "$ROOT/tests/compat/torch_record.py"
wait_exit 50 "$PID_a"
assert_rc a 1
cat "$TMP/a.err"
msg="ValueError: batch 7 of rank 1 is corrupt"
sed -n '/^Root Cause/,$p' "$TMP/a.err" > "$TMP/root"
[ -s "$TMP/root" ] || die "no 'Root Cause' block in ddprun's stderr"
assert_grep "$TMP/root" "^  rank      : 1 \(local_rank: 1\)$" "root cause rank"
assert_grep "$TMP/root" "^  exitcode  : 1 \(pid: [0-9]+\)$" "root cause exit code"
ef=$(sed -n 's/^  error_file: //p' "$TMP/root")
if [ -z "$ef" ] || [ ! -s "$ef" ]; then die "the root cause names no error file, or an empty one ('$ef')"; fi
# What torch wrote, read back with Python's own json.
read -r ts emsg < <(/usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["message"]
print(m["extraInfo"]["timestamp"], m["message"])' "$ef") || die "$ef is not torch's error-file JSON"
assert_eq "$emsg" "$msg" "the message torch wrote"
assert_grep "$TMP/root" "^  traceback : Traceback \(most recent call last\):$" "traceback, first line"
assert_grep "$TMP/root" "^ +File \".*/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line [0-9]+, in wrapper$" \
    "traceback, @record's wrapper frame"
assert_grep "$TMP/root" "^ +File \".*/torch_record.py\", line [0-9]+, in load_batch$" "traceback, the raising frame"
assert_grep "$TMP/root" "^ +$msg$" "traceback, last line"
assert_grep "$TMP/root" "^  time      : $(date -d "@$ts" +%Y-%m-%d_%H:%M:%S)$" "root cause time (the error file's)"
assert_grep "$TMP/a.err" "failed: $msg; stopping the group" "ddprun's log line"
assert_no_leftovers
