# Sourced after train.bash by the snapshot kill-and-resume scenarios
# (tests/integration/train_snapshot_kill.sh on the CPU,
# tests/gpu/gpu_snapshot_resume.sh on CUDA), with ${train[@]} set: one
# rank keeps a snapshot of every step (--snapshot-every 1: the state
# written in the background into the agent's memory) and no checkpoint
# before its last step, 300; it is SIGKILLed once step 12 is reported (a
# fast device runs dozens more before the kill lands: many steps, so that
# the kill comes before the end). The group restarts and resumes from the
# memory snapshot, losing at most the last step reported, and reaches step
# 300 with the same weights, bit for bit, as a run never killed.
clean_then_killed
agent=$AGENT
for _ in $(seq 1200); do
    grep -q " step 12/" "$SCRATCH/killed.log" && break
    sleep 0.05
done
grep -q " step 12/" "$SCRATCH/killed.log" || { echo "FAIL: step 12 never came"; tail -n 20 "$SCRATCH/killed.log"; exit 1; }
victim=$(pgrep -P "$agent" | head -n 1)
[ -n "$victim" ] || { echo "FAIL: no worker under agent $agent"; exit 1; }
kill -9 "$victim"
done_before=$(sed -n 's/.* step \([0-9]*\)\/.*/\1/p' "$SCRATCH/killed.log" | tail -n 1)
echo "killed worker $victim after step $done_before"
[ "$done_before" -lt 300 ] || { echo "FAIL: the run reached its last step before the kill: nothing was lost or resumed"; exit 1; }
wait "$agent" || { echo "FAIL: the killed run did not finish"; tail -n 30 "$SCRATCH/killed.log"; exit 1; }
grep -q "restart 1 of 1" "$SCRATCH/killed.log" || { echo "FAIL: the group did not restart"; cat "$SCRATCH/killed.log"; exit 1; }
from=$(sed -n 's/.*resuming from .*: epoch [0-9]*, step \([0-9]*\) (memory of node .*/\1/p' "$SCRATCH/killed.log" | head -n 1)
[ -n "$from" ] || { echo "FAIL: did not resume from a snapshot in memory"; grep -i 'resum\|snapshot' "$SCRATCH/killed.log"; exit 1; }
[ "$from" -ge $((done_before - 1)) ] ||
    { echo "FAIL: resumed from step $from after step $done_before was done: more than one step lost"; exit 1; }
compare "$SCRATCH/killed" "$SCRATCH/clean" --exact || { echo "FAIL: the resumed run's weights differ from the clean run's"; exit 1; }
echo "resumed from the snapshot of step $from (step $done_before was done when killed); weights at step 300 equal the clean run's, bit for bit"
