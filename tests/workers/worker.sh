#!/usr/bin/env bash
# The worker the agent scenarios run (ddprun --no-python tests/workers/worker.sh).
# What it does is set by W_* variables in ddprun's environment, which every
# worker inherits:
#   W_REC=DIR        write one record line to DIR/<pid> at start: pid= and
#                    every variable torchrun's agent sets (see VARS)
#   W_IGNORE_TERM=1  ignore SIGTERM (the agent must SIGKILL it)
#   W_ON_TERM=1      on SIGTERM, print "rank R got SIGTERM" and exit 0
#   W_ON_SIG=SIG     likewise for another signal (USR1)
#   W_FAIL_RANK=R    global rank R exits at once with W_FAIL_CODE (default 1) ...
#   W_ERROR_FILE=1   ... after writing torchrun's error file
#   W_HOLD=COND      (the other ranks) while the shell condition COND holds,
#                    keep running (polling every 50 ms, at most W_HOLD_MAX s,
#                    default 60)
#   W_LINES=N        print N lines of W_LINE_LEN (default 100) characters to
#                    stdout and to stderr: "W<rank> O|E <i> <rank digit>..."
#   W_EXIT=N         otherwise exit N (default 0)
VARS="LOCAL_RANK RANK GROUP_RANK ROLE_RANK ROLE_NAME LOCAL_WORLD_SIZE WORLD_SIZE
GROUP_WORLD_SIZE ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT
TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE
TORCHELASTIC_ERROR_FILE TORCH_NCCL_ASYNC_ERROR_HANDLING NCCL_ASYNC_ERROR_HANDLING OMP_NUM_THREADS
CUDA_VISIBLE_DEVICES"

[ -n "${W_IGNORE_TERM:-}" ] && trap '' TERM
[ -n "${W_ON_TERM:-}" ] && trap 'echo "rank $RANK got SIGTERM"; exit 0' TERM
# shellcheck disable=SC2064 # the signal's name is meant to be expanded now
[ -n "${W_ON_SIG:-}" ] && trap "echo \"rank \$RANK got SIG$W_ON_SIG\"; exit 0" "$W_ON_SIG"

if [ -n "${W_REC:-}" ]; then
    rec="pid=$$"
    for v in $VARS; do rec="$rec $v=${!v-<unset>}"; done
    echo "$rec" > "$W_REC/.$$" && mv "$W_REC/.$$" "$W_REC/$$"
fi
echo "worker rank $RANK of $WORLD_SIZE started (pid $$, restart $TORCHELASTIC_RESTART_COUNT)"

if [ "${W_FAIL_RANK:-x}" = "$RANK" ]; then
    if [ -n "${W_ERROR_FILE:-}" ]; then
        printf '{"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Traceback (most recent call last):\\n  File \\"train.py\\", line 7, in <module>\\n    step()\\nRuntimeError: boom on rank %s\\n", "timestamp": "%s"}}}\n' \
            "$RANK" "$(date +%s)" > "$TORCHELASTIC_ERROR_FILE"
    fi
    echo "rank $RANK fails with exit code ${W_FAIL_CODE:-1}" >&2
    exit "${W_FAIL_CODE:-1}"
fi

if [ -n "${W_HOLD:-}" ]; then
    end=$((SECONDS + ${W_HOLD_MAX:-60}))
    while eval "$W_HOLD" && [ "$SECONDS" -lt "$end" ]; do sleep 0.05; done
fi

if [ -n "${W_LINES:-}" ]; then
    fill=$(printf "%${W_LINE_LEN:-100}s" "" | tr ' ' "${RANK: -1}")
    for ((i = 0; i < W_LINES; i++)); do
        printf 'W%s O %d %s\n' "$RANK" "$i" "$fill"
        printf 'W%s E %d %s\n' "$RANK" "$i" "$fill" >&2
    done
fi

exit "${W_EXIT:-0}"
