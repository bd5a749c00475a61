#!/usr/bin/env bash
# A Python worker stuck in a collective, traced in the summary: two ranks
# of a torch script (Debian's torch, gloo) under the worker watchdog
# (TORCHELASTIC_ENABLE_FILE_TIMER=1, torch's FileTimerClient); rank 1
# never reaches the barrier, rank 0 waits in it past its 2 s deadline.
# Before the kill the agent asks for the stacks (the script registered
# faulthandler on DDPRUN_STACK_SIGNAL); what rank 0 writes becomes its
# failure's traceback, so torchrun's summary shows rank 0 inside
# dist.barrier() at the script's line, with the watchdog's reason.
# timeout: 60
source "$(dirname "$0")/../lib/train.bash"
/usr/bin/python3 -c 'import torch.distributed; from torch.distributed.elastic.timer import FileTimerClient' 2> /dev/null ||
    { echo "skipped: Debian's python3-torch is missing"; exit 77; }
export TORCHELASTIC_ENABLE_FILE_TIMER=1
unset TORCHELASTIC_TIMER_FILE
cat > "$SCRATCH/stuck.py" <<'PY'
import faulthandler, os, time
import torch.distributed as dist
from torch.distributed.elastic import timer
faulthandler.register(int(os.environ["DDPRUN_STACK_SIGNAL"]), all_threads=True)
timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    with timer.expires(after=60, scope="late"):
        time.sleep(60)  # never comes to the barrier
with timer.expires(after=2, scope="barrier"):
    dist.barrier()  # line 11: where rank 0 waits
PY
rc=0
PYTHON_EXEC=/usr/bin/python3 timeout 40 ddprun --standalone --nproc-per-node 2 --max-restarts 0 \
    "$SCRATCH/stuck.py" > "$SCRATCH/job.log" 2>&1 || rc=$?
[ $rc -eq 1 ] || { cat "$SCRATCH/job.log"; echo "ddprun exited $rc, not 1"; exit 1; }
sed -n '/^Root Cause/,/^=====/p' "$SCRATCH/job.log" > "$SCRATCH/root.txt"
grep -q "rank      : 0 (local_rank: 0)" "$SCRATCH/root.txt" &&
    grep -q "its stacks, written when the watchdog asked before its kill:" "$SCRATCH/root.txt" &&
    grep -q 'in barrier' "$SCRATCH/root.txt" &&
    grep -q "stuck.py\", line 11 in <module>" "$SCRATCH/root.txt" &&
    grep -q "stopped by the worker watchdog, 'barrier' ran past its deadline" "$SCRATCH/root.txt" ||
    { cat "$SCRATCH/job.log"; echo "the summary does not show rank 0's stack inside the barrier"; exit 1; }
echo "the summary's root cause: rank 0, its Python stack inside dist.barrier() (stuck.py line 11)"

# At shutdown: a worker that ignores SIGTERM is asked for its stacks when
# --shutdown-timeout has passed, and killed 2 s later: its stack is in the
# log, where it was stuck.
cat > "$SCRATCH/deaf.py" <<'PY'
import faulthandler, os, signal, time
faulthandler.register(int(os.environ["DDPRUN_STACK_SIGNAL"]), all_threads=True)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
while True:
    time.sleep(1)  # line 6: deaf to SIGTERM
PY
PYTHON_EXEC=/usr/bin/python3 ddprun --standalone --nproc-per-node 1 --shutdown-timeout 1 \
    "$SCRATCH/deaf.py" > "$SCRATCH/deaf.log" 2>&1 &
agent=$!
PIDS+=($agent)
for _ in $(seq 100); do grep -q "ready" "$SCRATCH/deaf.log" && break; sleep 0.1; done
kill -TERM "$agent"
rc=0
wait "$agent" || rc=$?
grep -q "did not stop within the shutdown timeout; asked for its stacks (in its log), SIGKILL in 2 s" "$SCRATCH/deaf.log" &&
    grep -q "deaf.py\", line 6 in <module>" "$SCRATCH/deaf.log" ||
    { cat "$SCRATCH/deaf.log"; echo "no stack of the worker that would not stop"; exit 1; }
echo "at shutdown: the deaf worker's stack (deaf.py line 6) before its SIGKILL; ddprun exited $rc"
