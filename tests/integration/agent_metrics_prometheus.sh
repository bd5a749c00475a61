#!/usr/bin/env bash
# A real Prometheus (Debian's) scrapes an agent's --metrics-port every
# second while the agent runs two ddp-train ranks with checkpoints; one
# worker is killed with SIGKILL and the group restarts. Prometheus' query
# API then holds, from the agent: ddprun_workers_up 2,
# ddprun_restarts_total 1, one ddprun_worker_failures_total (below),
# a rendezvous round per group, a fresh heartbeat; and from each rank
# (labels rank and local_rank): its step, loss, images per second, step
# and all-reduce times, bytes all-reduced, and rank 0's checkpoint times.
# Prometheus listens on 127.0.0.1 with its own configuration and data
# under the scenario's temporary directory.
# timeout: 150
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

PROM=$(command -v prometheus || true)
[ -n "$PROM" ] || skip "skipped: prometheus (Debian's prometheus package) is not installed"
command -v ddp-train > /dev/null || skip "skipped: ddp-train is not built"
command -v curl > /dev/null || skip "skipped: curl is not installed"

mport=$(free_port)
pport=$(free_port)
mkdir -p "$TMP/prom"
cat > "$TMP/prom/prometheus.yml" << EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: ddprun
    static_configs:
      - targets: ['127.0.0.1:$mport']
EOF
"$PROM" --config.file="$TMP/prom/prometheus.yml" --storage.tsdb.path="$TMP/prom/data" \
    --web.listen-address="127.0.0.1:$pport" > "$TMP/prom.log" 2>&1 &
PIDS+=($!)
prom_ready() { curl -sf "http://127.0.0.1:$pport/-/ready" > /dev/null; }
wait_for 30 "Prometheus to be ready" prom_ready

# The value of an instant query's first series ("none" without one).
query() {
    curl -s "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1" |
        /usr/bin/python3 -c 'import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "none")'
}
# query_is SECONDS QUERY COMPARISON: waits until the value satisfies
# COMPARISON (an awk condition on v, e.g. "v == 2").
query_is() {
    local secs=$1 q=$2 cond=$3 start v
    start=$(now_ms)
    while :; do
        v=$(query "$q")
        [ "$v" != none ] && awk -v v="$v" "BEGIN { exit !($cond) }" && return 0
        if [ $(($(now_ms) - start)) -ge $((secs * 1000)) ]; then
            tail -n 5 "$TMP/prom.log" >&2
            dump job
            # (last, so that the end of the output, all a test runner shows, names it)
            echo "FAIL: $q is $v after $secs s, wanted $cond" >&2
            exit 1
        fi
        sleep 0.5
    done
}

start_ddprun job --standalone --nproc-per-node=2 --max-restarts=1 \
    --metrics-port "127.0.0.1:$mport" --no-python ddp-train --model resnet20 --data synthetic \
    --input-shape 3x16x16 --synthetic-size 4096 --threads 1 --no-eval --log-every 100000 \
    --batch-size 16 --epochs 1000 --ckpt-dir "$TMP/ckpt" --ckpt-every 20
wait_line 10 "$TMP/job.err" "metrics-port: serving http://127.0.0.1:$mport/metrics"

query_is 30 'ddprun_workers_up' 'v == 2'
query_is 30 'ddprun_train_step{rank="1",local_rank="1"}' 'v > 0'
query_is 10 'ddprun_restarts_total' 'v == 0'

# SIGKILL to one worker: the group restarts once.
# (the worker of rank 1 by its environment: not whatever child comes first)
victim=$(worker_pid "$PID_job" RANK=1)
[ -n "$victim" ] || die "no worker of rank 1 found under agent $PID_job ($(pgrep -P "$PID_job" | tr '\n' ' '))"
kill -KILL "$victim"
echo "killed rank 1's worker, pid $victim: $(tr '\0' ' ' < "/proc/$victim/cmdline" 2> /dev/null | cut -c1-60)"
# One failure counted, and its cause is the SIGKILL: rank 0 exits too when
# its peer's connection closes, often reaped in the same turn of the
# agent's loop and sometimes first, but a killed worker is the root cause.
query_is 30 'sum(ddprun_worker_failures_total)' 'v == 1'
query_is 10 'ddprun_worker_failures_total{cause="SIGKILL"}' 'v == 1'
query_is 30 'ddprun_restarts_total' 'v == 1'
query_is 30 'ddprun_rendezvous_rounds_total' 'v == 2'
query_is 30 'ddprun_workers_up' 'v == 2'
query_is 10 'ddprun_failure_restarts' 'v == 1'
query_is 10 'ddprun_heartbeat_age_seconds' 'v >= 0 && v < 5'
query_is 10 'ddprun_rendezvous_duration_seconds_count' 'v == 2'
query_is 10 'ddprun_agent_state{state="running"}' 'v == 1'

# The ranks' own series, through the agent, after the restart.
for r in 0 1; do
    sel="{rank=\"$r\",local_rank=\"$r\",role=\"default\"}"
    query_is 30 "ddprun_train_step$sel" 'v > 20'
    query_is 10 "ddprun_train_loss$sel" 'v > 0 && v < 10'
    query_is 10 "ddprun_train_accuracy$sel" 'v >= 0 && v <= 1'
    query_is 10 "ddprun_train_images_per_second$sel" 'v > 0'
    query_is 10 "ddprun_train_images_total$sel" 'v > 0'
    query_is 10 "ddprun_train_step_seconds_count$sel" 'v > 0'
    query_is 10 "ddprun_train_step_seconds_sum$sel / ddprun_train_step_seconds_count$sel" 'v > 0 && v < 5'
    query_is 10 "ddprun_train_allreduce_wait_seconds_count$sel" 'v > 0'
    query_is 10 "ddprun_train_allreduce_bytes_total$sel" 'v > 1000000'
done
query_is 30 'ddprun_train_checkpoint_seconds_count{rank="0"}' 'v > 0'
# every series carries the job's labels
query_is 10 'count(ddprun_train_step{node!="",run_id!=""})' 'v == 2'

kill -TERM "$PID_job"
wait_exit 40 "$PID_job"
echo "ok: Prometheus scraped the agent's and both ranks' series, restart counted"
