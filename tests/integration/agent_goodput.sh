#!/usr/bin/env bash
# Goodput against a hand count: two ddp-train ranks, 400 steps, rank 1
# killed (SIGKILL) at step 100 and again at step 250; the group restarts
# twice and resumes from memory. The agent's last line says where the
# node's time went. By hand, from rank 0's --metrics file (a line per step
# with its time since the attempt's training began, a start line per
# attempt): each step's time is the time since the step before it in the
# same attempt (an attempt's first: since its training began), each step
# number counted once, from its last attempt; a step in two attempts was
# redone. The agent's steps kept (with the waits for data and checkpoints
# it takes out of them) are within 2% of the hand count, and it counts the
# same redone steps.
# timeout: 120
source "$(dirname "$0")/../lib/train.bash"
ddprun --standalone --nproc-per-node 2 --max-restarts 2 --no-python ddp-train \
    --data synthetic --input-shape 3x16x16 --synthetic-size 100000 --threads 1 --no-eval \
    --metrics "$SCRATCH/steps.jsonl" --batch-size 8 --max-steps 400 > "$SCRATCH/job.log" 2>&1 &
agent=$!
PIDS+=($agent)
kill_rank1_at() { # STEP: once rank 0 has printed it
    for _ in $(seq 600); do grep -q "\"global_step\":$1," "$SCRATCH/steps.jsonl" 2> /dev/null && break; sleep 0.02; done
    local p
    p=$(worker_of_rank 1 "$agent")
    [ -n "$p" ] || { cat "$SCRATCH/job.log"; echo "no rank 1 at step $1"; exit 1; }
    kill -9 "$p"
}
kill_rank1_at 100
for _ in $(seq 300); do [ "$(grep -c "started 2 workers" "$SCRATCH/job.log")" -ge 2 ] && break; sleep 0.05; done
kill_rank1_at 250
rc=0
wait "$agent" || rc=$?
[ $rc -eq 0 ] || { cat "$SCRATCH/job.log"; echo "ddprun exited $rc"; exit 1; }
grep -q "restart 2 of 2" "$SCRATCH/job.log" || { cat "$SCRATCH/job.log"; echo "not two restarts"; exit 1; }
/usr/bin/python3 - "$SCRATCH/job.log" "$SCRATCH/steps.jsonl" <<'PY' || { cat "$SCRATCH/job.log"; exit 1; }
import json, re, sys
attempts, cur = [], None
agent = None
for line in open(sys.argv[2]):
    j = json.loads(line)
    if j.get("event") == "start":
        cur = []
        attempts.append(cur)
    elif "time" in j:
        cur.append((j["global_step"], j["time"]))
for text in open(sys.argv[1]):
    g = re.search(r"goodput ([\d.]+)% of ([\d.]+) s: steps kept ([\d.]+) s, redone ([\d.]+) s "
                  r"\((\d+) steps\), rendezvous ([\d.]+) s, start-up ([\d.]+) s, restarts ([\d.]+) s, "
                  r"waiting for data "
                  r"([\d.]+) s, for checkpoints ([\d.]+) s", text)
    if g:
        agent = [float(x) for x in g.groups()]
assert agent, "no goodput line"
assert len(attempts) == 3, f"{len(attempts)} attempts"
last = {}  # step -> (attempt, its time)
done = {}
for a, steps in enumerate(attempts):
    prev = None
    for n, t in steps:  # (t: since the attempt's training began)
        d = t - prev[1] if prev and prev[0] == n - 1 else t
        done[n] = done.get(n, 0) + 1
        last[n] = d
        prev = (n, t)
assert sorted(last) == list(range(1, 401)), "steps missing"
hand = sum(last.values())
redone = sum(c - 1 for c in done.values())
ratio, wall, kept, red_s, red_n, rdzv, startup, restarts, data, ckpt = agent
mine = kept + data + ckpt
print(f"hand count: {hand:.2f} s in 400 steps, {redone} redone; ddprun: kept {kept:.2f} s "
      f"(+ {data:.2f} s data, {ckpt:.2f} s checkpoints = {mine:.2f} s), {int(red_n)} redone, "
      f"goodput {ratio:.1f}% of {wall:.1f} s, restarts {restarts:.2f} s, rendezvous {rdzv:.2f} s")
assert abs(mine - hand) <= 0.02 * hand, f"{mine:.3f} s against {hand:.3f} s by hand"
assert abs(red_n - redone) <= 1, f"{red_n} redone steps against {redone} by hand"
assert restarts > 0, "no time in restarts"
assert startup > 0, "no time in start-up"
assert abs(kept / wall * 100 - ratio) <= 0.5, f"goodput {ratio}% is not kept / wall"  # (rounding)
PY
