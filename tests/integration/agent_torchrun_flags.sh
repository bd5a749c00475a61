#!/usr/bin/env bash
# torchrun 2.x's output and signal flags: --log-line-prefix-template (and
# TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) sets the tee'd lines' prefix, by
# default "[${role_name}${local_rank}]:"; --duplicate-stdout-filters and
# --duplicate-stderr-filters copy the tee'd lines holding any filter into
# the attempt's filtered_stdout.log / filtered_stderr.log; SIGUSR1, once
# listed in --signals-to-handle, reaches the workers and stops the job
# (exit 128+10); --event-log-handler console writes torchrun's worker
# events as JSON lines; --print-completion bash gives a working completion.
# timeout: 40
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

# The prefix template and the duplicated lines.
W_LINES=3 W_LINE_LEN=4 start_ddprun t --standalone --nproc-per-node=2 --role trainer --tee 3 \
    --log-dir "$TMP/logs" --log-line-prefix-template '${hostname}|${rank}|${local_rank}> ' \
    --duplicate-stdout-filters "O 1,O 2" --duplicate-stderr-filters "E 0" \
    --no-python "$WORKERS/worker.sh"
wait_exit 20 "$PID_t"
assert_rc t 0
host=$(hostname)
assert_grep "$TMP/t.out" "^$host|1|1> W1 O 2 1111$" "a stdout line with the template's prefix"
assert_grep "$TMP/t.err" "^$host|0|0> W0 E 0 0000$" "a stderr line with the template's prefix"
filtered=$(echo "$TMP"/logs/*/attempt_0/filtered_stdout.log)
[ -f "$filtered" ] || die "no filtered_stdout.log in the attempt's log directory"
assert_eq "$(sort "$filtered" | tr '\n' ';')" \
    "$host|0|0> W0 O 1 0000;$host|0|0> W0 O 2 0000;$host|1|1> W1 O 1 1111;$host|1|1> W1 O 2 1111;" \
    "filtered_stdout.log: the stdout lines holding 'O 1' or 'O 2', of both ranks"
assert_eq "$(sort "${filtered%/*}/filtered_stderr.log" | tr '\n' ';')" \
    "$host|0|0> W0 E 0 0000;$host|1|1> W1 E 0 1111;" "filtered_stderr.log"

# The variable sets the template; the default prefix is the local rank's.
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='<${role_name}:${rank}> ' start_ddprun e --standalone \
    --nproc-per-node=1 --tee 1 --no-python "$WORKERS/worker.sh"
wait_exit 15 "$PID_e"
assert_rc e 0
assert_grep "$TMP/e.out" "^<default:0> worker rank 0 of 1 started" "the template from the variable"
start_ddprun d --standalone --nproc-per-node=2 --role r --tee 1 --no-python "$WORKERS/worker.sh"
wait_exit 15 "$PID_d"
assert_rc d 0
assert_grep "$TMP/d.out" "^\[r1\]:worker rank 1 of 2 started" "the default prefix"

# SIGUSR1, listed, reaches the workers and stops the job.
W_ON_SIG=USR1 W_HOLD=true start_ddprun s --standalone --nproc-per-node=2 \
    --signals-to-handle SIGTERM,SIGUSR1 --no-python "$WORKERS/worker.sh"
wait_line 15 "$TMP/s.out" "worker rank 1 of 2 started"
wait_line 15 "$TMP/s.out" "worker rank 0 of 2 started"
kill -USR1 "$PID_s"
wait_exit 15 "$PID_s"
assert_rc s 138
assert_grep "$TMP/s.out" "^rank 0 got SIGUSR1" "rank 0 got SIGUSR1"
assert_grep "$TMP/s.out" "^rank 1 got SIGUSR1" "rank 1 got SIGUSR1"
assert_grep "$TMP/s.err" "SIGUSR1 received: forwarding it to the workers" "the agent's line"

# --event-log-handler console: one event per worker's end, as torchrun's
# (and the agent's own events, source AGENT, as in the event log file).
W_FAIL_RANK=1 W_FAIL_CODE=3 W_HOLD=true start_ddprun ev --standalone --nproc-per-node=2 \
    --event-log-handler console --no-python "$WORKERS/worker.sh"
wait_exit 15 "$PID_ev"
assert_rc ev 1
got=$(grep '^{' "$TMP/ev.err" | python3 -c '
import json, sys
for line in sys.stdin:
    e = json.loads(line); m = e["metadata"]
    if e["source"] != "WORKER": continue
    print(e["name"], e["source"], m["global_rank"], m["state"], m["raw_error"],
          json.loads(m["metadata"])["exit_code"], m["role"])' | sort)
assert_eq "$got" "torchelastic.worker.status.FAILED WORKER 1 FAILED exited with code 3 3 default
torchelastic.worker.status.TERMINATED WORKER 0 TERMINATED None -15 default" "the events"
assert_grep "$TMP/ev.err" '^\{"name":"ddprun.agent.shutdown","source":"AGENT"' "the agent's last event on the console"

# --print-completion bash: options and the choices of --numa-binding.
ddprun --print-completion bash > "$TMP/complete.bash" || die "--print-completion bash failed"
got=$(bash -c '. "$1"; COMP_WORDS=(ddprun --numa-binding c); COMP_CWORD=2; _ddprun
    echo "${COMPREPLY[*]}"; COMP_WORDS=(ddprun --signals-to); COMP_CWORD=1; _ddprun
    echo "${COMPREPLY[*]}"' _ "$TMP/complete.bash")
assert_eq "$got" $'core-complex\n--signals-to-handle' "completions"
# Every option the completion knows is in --help.
ddprun --help > "$TMP/help.txt"
for opt in $(sed -n 's/.*compgen -W "\(--nnodes[^"]*\)".*/\1/p' "$TMP/complete.bash"); do
    grep -q -- "$opt\b" "$TMP/help.txt" || die "--help does not list $opt"
done
ddprun --print-completion fish > /dev/null 2> "$TMP/fish.err" && die "fish accepted"
assert_grep "$TMP/fish.err" "print-completion" "the message for an unknown shell"
echo "prefix template, duplicated lines, SIGUSR1 forwarding and completion: as torchrun 2.x"
