#!/usr/bin/env bash
# torchrun's worker watchdog, TORCHELASTIC_ENABLE_FILE_TIMER=1: ddprun
# serves torch's FileTimer protocol on the FIFO it names in
# TORCHELASTIC_TIMER_FILE. (1) torch's own FileTimerClient (Debian's torch):
# a rank that overruns `with expires(after=1)` is killed, the failure says
# why, and the group restarts and finishes. (2) ddp-train's --step-timeout:
# a rank frozen mid-training (SIGSTOP) is killed by the watchdog within the
# step timeout, long before the collective's own timeout, and the restarted
# group resumes from the checkpoint and finishes. Before each kill the
# agent asks the workers that catch DDPRUN_STACK_SIGNAL for their stacks:
# the sleeping Python rank's (faulthandler), the waiting ddp-train rank's
# every thread.
# timeout: 90
source "$(dirname "$0")/../lib/train.bash"
export TORCHELASTIC_ENABLE_FILE_TIMER=1
unset TORCHELASTIC_TIMER_FILE

if /usr/bin/python3 -c 'from torch.distributed.elastic.timer import FileTimerClient' 2>/dev/null; then
    cat > "$SCRATCH/timed.py" <<'PY'
import faulthandler, os, time
from torch.distributed.elastic import timer
# the agent asks for the stacks before the watchdog's kill (agent/stacks.h)
faulthandler.register(int(os.environ["DDPRUN_STACK_SIGNAL"]), all_threads=True)
timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
with timer.expires(after=1, scope="my_step"):
    if os.environ["RANK"] == "1" and restart == 0:
        time.sleep(60)
print("rank", os.environ["RANK"], "done at restart", restart, flush=True)
PY
    rc=0
    PYTHON_EXEC=/usr/bin/python3 timeout 40 ddprun --standalone --nproc-per-node 2 \
        --max-restarts 1 "$SCRATCH/timed.py" > "$SCRATCH/torch.log" 2>&1 || rc=$?
    [ $rc -eq 0 ] || { cat "$SCRATCH/torch.log"; echo "torch client: ddprun exited $rc"; exit 1; }
    grep -q "worker watchdog: local rank 1 (rank 1, pid [0-9]*) ran past its deadline in 'my_step'" \
        "$SCRATCH/torch.log" || { cat "$SCRATCH/torch.log"; echo "no watchdog line"; exit 1; }
    grep -q "failed: .*stopped by the worker watchdog, 'my_step' ran past its deadline" \
        "$SCRATCH/torch.log" || { cat "$SCRATCH/torch.log"; echo "the failure does not say why"; exit 1; }
    grep -q "^rank 1 done at restart 1" "$SCRATCH/torch.log" || { cat "$SCRATCH/torch.log"; exit 1; }
    # the sleeping rank's Python stack, written before the kill
    grep -q "worker watchdog: local rank 1 .* asked [12] workers\? for \(its\|their\) stacks" "$SCRATCH/torch.log" &&
        grep -A3 "most recent call first" "$SCRATCH/torch.log" | grep -q "timed.py\", line 9 in <module>" ||
        { cat "$SCRATCH/torch.log"; echo "no Python stack of the sleeping rank"; exit 1; }
    [ ! -e "$(sed -n 's/.*FileTimer requests on //p' "$SCRATCH/torch.log")" ] || {
        echo "the FIFO was left behind"; exit 1; }
    echo "torch's FileTimerClient: the overrunning rank was killed and the group restarted"
else
    echo "torch's FileTimerClient part skipped: Debian's torch is missing"
fi

args=(--data synthetic --input-shape 3x16x16 --synthetic-size 100000 --threads 1 --no-eval
      --log-every 1 --batch-size 8 --ckpt-dir "$SCRATCH/ck" --ckpt-every 5 --max-steps 300
      --step-timeout 2 --timeout 60 --snapshot-every 1)
ddprun --standalone --nproc-per-node 2 --max-restarts 1 --no-python ddp-train "${args[@]}" \
    > "$SCRATCH/train.log" 2>&1 &
agent=$!
PIDS+=($agent)
for _ in $(seq 300); do grep -q "step 5/" "$SCRATCH/train.log" && break; sleep 0.1; done
# (a step takes about 10 ms here: 300 of them leave time to catch one rank)
victim=$(ps --ppid "$agent" -o pid= | head -n 1 | tr -d ' ' || true)
[ -n "$victim" ] || { cat "$SCRATCH/train.log"; echo "no worker found"; exit 1; }
t0=$(date +%s%N)
kill -STOP "$victim"
done_before=$(sed -n 's/.* step \([0-9]*\)\/.*/\1/p' "$SCRATCH/train.log" | tail -n 1)
rc=0
wait "$agent" || rc=$?
[ $rc -eq 0 ] || { cat "$SCRATCH/train.log"; echo "ddprun exited $rc"; exit 1; }
killed_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
grep -q "worker watchdog: local rank [01] (rank [01], pid $victim) ran past its deadline in 'ddp-train step'" \
    "$SCRATCH/train.log" || { cat "$SCRATCH/train.log"; echo "the frozen rank was not killed"; exit 1; }
# (from memory, or from --ckpt-dir when the frozen rank 0 had written a
# checkpoint of its last step but not yet its snapshot)
from=$(sed -n 's/.*resuming from .*: epoch [0-9]*, step \([0-9]*\) (\(memory\|disk\) of node .*/\1/p' "$SCRATCH/train.log" | head -n 1)
[ -n "$from" ] || { cat "$SCRATCH/train.log"; echo "no resume"; exit 1; }
# The frozen rank stopped in the step after the last one printed: nothing
# more than that step, and the one before while its snapshot was written, is redone.
[ "$from" -ge $((done_before - 1)) ] ||
    { cat "$SCRATCH/train.log"; echo "resumed from step $from, after step $done_before was done"; exit 1; }
grep -q "step 300/" "$SCRATCH/train.log" || { cat "$SCRATCH/train.log"; echo "did not finish"; exit 1; }
# Before the kill, the agent asked the workers for their stacks: the rank
# that was not frozen wrote every thread's, its main thread inside train_run
# (the frozen one cannot run its handler).
grep -q "worker watchdog: .* asked [12] workers\? for \(its\|their\) stacks (in their logs) before SIGKILL" "$SCRATCH/train.log" &&
    grep -q "ddp-train: rank [01]: the stacks of every thread, asked for by the launcher (step [0-9]* under way; collective #[0-9]* \(entered, not finished\|finished\))" "$SCRATCH/train.log" &&
    [ "$(grep -c "^ddp-train: rank [01], thread [0-9]*:" "$SCRATCH/train.log")" -ge 2 ] &&
    grep -q "(train_run+0x" "$SCRATCH/train.log" ||
    { cat "$SCRATCH/train.log"; echo "no stacks of the waiting rank before the kill"; exit 1; }
echo "ddp-train --step-timeout 2: the frozen rank killed after step $done_before, the group resumed from step $from and finished ($killed_ms ms in all)"
