#!/usr/bin/env bash
# The straggler watch: three ddp-train ranks (c10d, --straggler-window 1);
# rank 1 is slowed as a CPU limit would (stopped 60 ms of every 100). Within
# a few windows the log names rank 1 a straggler, and only rank 1; so do
# `ddprun status`, the event log (ddprun.agent.straggler, SLOW) and the
# metrics (ddprun_worker_straggler); both show the node's goodput too. Once its CPU is its own again it is
# no longer one (RECOVERED), and the job finishes.
# timeout: 90
source "$(dirname "$0")/../lib/train.bash"
port=$(free_port)
ddprun --nnodes 1 --nproc-per-node 3 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
    --rdzv-id slow --straggler-window 1 --metrics-port 0 --log-dir "$SCRATCH/logs" \
    --no-python ddp-train --data synthetic --input-shape 3x16x16 --synthetic-size 100000 \
    --threads 1 --no-eval --log-every 100 --batch-size 8 --max-steps 100000000 \
    > "$SCRATCH/job.log" 2>&1 &
agent=$!
PIDS+=($agent)
for _ in $(seq 300); do grep -q "step 100/" "$SCRATCH/job.log" && break; sleep 0.1; done
victim=$(worker_of_rank 1 "$agent")
[ -n "$victim" ] || { cat "$SCRATCH/job.log"; echo "no rank 1 found"; exit 1; }
( while kill -STOP "$victim" 2> /dev/null; do sleep 0.06; kill -CONT "$victim"; sleep 0.04; done ) &
slower=$!
PIDS+=($slower)
found=
for _ in $(seq 200); do
    grep -q "straggler: rank 1 computes" "$SCRATCH/job.log" && { found=1; break; }
    sleep 0.1
done
[ -n "$found" ] || { kill "$slower"; cat "$SCRATCH/job.log"; echo "rank 1 was not found a straggler in 20 s"; exit 1; }
sleep 1.5 # (the agent tells of its own rank from node rank 0's list: a window later at most)
ddprun status --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id slow \
    > "$SCRATCH/status.txt" 2>&1 || { cat "$SCRATCH/status.txt"; echo "status failed"; exit 1; }
mport=$(sed -n 's/.*metrics-port: serving http:\/\/127.0.0.1:\([0-9]*\)\/metrics.*/\1/p' "$SCRATCH/job.log" | head -n 1)
[ -n "$mport" ] || { cat "$SCRATCH/job.log"; echo "no metrics port logged"; exit 1; }
/usr/bin/python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$mport/metrics').read().decode())" \
    > "$SCRATCH/metrics.txt"
kill "$slower"
wait "$slower" 2> /dev/null || true
kill -CONT "$victim" 2> /dev/null || true
grep -q "straggler: rank 1 on .* computes .* ms a step, the median .* ms (+[0-9]*%)" "$SCRATCH/status.txt" ||
    { cat "$SCRATCH/status.txt"; echo "ddprun status does not show rank 1 a straggler"; exit 1; }
grep -q "^goodput of .*: [0-9.]*% of [0-9]* s in steps kept; .* stragglers [0-9.]* s$" "$SCRATCH/status.txt" &&
    grep -q '^ddprun_goodput_ratio{.*} 0\.[0-9]' "$SCRATCH/metrics.txt" ||
    { cat "$SCRATCH/status.txt" "$SCRATCH/metrics.txt"; echo "no goodput in the status or the metrics"; exit 1; }
grep -q '^ddprun_worker_straggler{.*local_rank="1",rank="1"} 1$' "$SCRATCH/metrics.txt" &&
    grep -q '^ddprun_worker_straggler{.*local_rank="0",rank="0"} 0$' "$SCRATCH/metrics.txt" &&
    grep -q '^ddprun_worker_compute_seconds{.*rank="2"} 0\.0' "$SCRATCH/metrics.txt" ||
    { cat "$SCRATCH/metrics.txt"; echo "the metrics do not show rank 1 alone a straggler"; exit 1; }
found=
for _ in $(seq 200); do
    grep -q "rank 1 is no longer a straggler" "$SCRATCH/job.log" && { found=1; break; }
    sleep 0.1
done
[ -n "$found" ] || { cat "$SCRATCH/job.log"; echo "rank 1 still a straggler 20 s after its CPU came back"; exit 1; }
kill -TERM "$agent"
wait "$agent" || true
! grep -q "straggler: rank [02] " "$SCRATCH/job.log" ||
    { cat "$SCRATCH/job.log"; echo "a rank that was not slowed was called a straggler"; exit 1; }
events=$SCRATCH/logs/events.jsonl
[ -e "$events" ] || events=$(find "$SCRATCH/logs" -name events.jsonl | head -n 1)
grep '"ddprun.agent.straggler"' "$events" | grep -q '"node_state": *"SLOW".*"straggler_rank": *1\|"straggler_rank": *1.*"node_state": *"SLOW"' &&
    grep '"ddprun.agent.straggler"' "$events" | grep -q '"RECOVERED"' ||
    { cat "$events"; echo "no straggler events for rank 1"; exit 1; }
echo "$(grep -o "straggler: rank 1 computes.*" "$SCRATCH/job.log" | head -n 1); then $(grep -o "rank 1 is no longer a straggler.*" "$SCRATCH/job.log" | head -n 1)"
