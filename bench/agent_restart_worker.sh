#!/usr/bin/env bash
T0=$EPOCHREALTIME # first: when the shell got here
# bench/agent_restart_worker.py as a shell script (run with ddprun
# --no-python): ddprun's own floor for the restart latency, without a
# Python interpreter's start-up.
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
    if [ "$RANK" = 1 ]; then
        sleep "${BENCH_FAIL_AFTER:-1}"
        echo "$EPOCHREALTIME" > "$BENCH_OUT/fail"
        exit 1
    fi
    exec sleep 300
fi
echo "$T0" > "$BENCH_OUT/start.$RANK"
