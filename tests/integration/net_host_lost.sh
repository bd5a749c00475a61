#!/usr/bin/env bash
# timeout: 180
# A host lost without a word (its link taken down: no FIN, no RST) from an
# elastic job on three test hosts (tests/lib/netbed.bash), --nnodes=2:3,
# two workers each, checkpoints every 5 steps on every host. The
# survivors' heartbeats tell them; their workers stop at once (the
# communicator aborts on SIGTERM) and the two of them re-form without
# waiting out the last call: their first step of the new round comes
# within 12 s of the loss, at world size 4 with the global batch kept,
# from the newest snapshot in their memory (--snapshot-every 1: at most the
# step under way is done again), and they finish. The lost host's agent
# gives up naming the store, and leaves no process behind.
source "$(dirname "$0")/../lib/agent.bash"
source "$(dirname "$0")/../lib/netbed.bash"
netbed_up 3
port=29613
args=(--model resnet20 --data synthetic --input-shape 3x16x16 --synthetic-size 200000 --threads 1
      --no-eval --log-every 1 --batch-size 8 --ckpt-every 5 --snapshot-every 1 --max-steps 80 --seed 3)
netbed_elastic lost "$port" "${args[@]}"
wait_line 60 "$TMP/lost.h1.out" "step 12/"
t0=$(now_ms)
netbed_link 3 down
# The new round's first step on host 1: a step line after "(round 1)".
first_step() { sed -n '/(round 1)/,$p' "$TMP/lost.h1.err" | grep -q "resuming" &&
               [ "$(grep -c "step [0-9]*/" "$TMP/lost.h1.out")" -gt "$steps_before" ]; }
steps_before=$(grep -c "step [0-9]*/" "$TMP/lost.h1.out")
wait_for 30 "host 1's first step of the new round" first_step
ms=$(($(now_ms) - t0))
echo "survivors' first step of the new round: $ms ms after the loss"
[ "$ms" -le 12000 ] || { dump lost.h1 lost.h2; die "recovery took $ms ms (target 12000)"; }
wait_exit 120 "$PID_lost_h1"; assert_rc lost.h1 0
wait_exit 60 "$PID_lost_h2"; assert_rc lost.h2 0
grep -q "4 ranks" "$TMP/lost.h1.err" || { dump lost.h1; die "rank 0 never trained at 4 ranks"; }
grep -q "keeps the global batch of 48" "$TMP/lost.h1.err" || { dump lost.h1; die "the global batch was not kept"; }
grep -q "done: 80 steps" "$TMP/lost.h1.out" || { dump lost.h1; die "the job did not finish"; }
netbed_redone lost.h1 1 # the survivors resumed from their own memory
# The lost host: its agent gives up on its own, naming the store.
wait_exit 90 "$PID_lost_h3"
[ "$RC" -ne 0 ] || { dump lost.h3; die "the lost host's ddprun exited 0"; }
grep -q "lost the rendezvous: the store at $(netbed_addr 1):$port" "$TMP/lost.h3.err" ||
    { dump lost.h3; die "the lost host's ddprun did not name the store"; }
for p in $(tagged_pids); do
    [ "$(ip netns identify "$p" 2> /dev/null)" != "$(netbed_ns 3)" ] ||
        die "process $p ($(tr '\0' ' ' < "/proc/$p/cmdline")) is still running on the lost host"
done
grep -h "error" "$TMP/lost.h3.err" | head -n 1
