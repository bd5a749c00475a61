#!/usr/bin/env bash
# timeout: 120
# The etcd-v3 rendezvous across machines: three test hosts
# (tests/lib/netbed.bash), each running one member of a three-member etcd
# cluster (on its bed address) and one ddprun agent with one ddp-train
# worker, --nnodes=2:3, every agent listing all three members. Checkpoints
# go to one directory all hosts share, as a cluster's shared file system.
#  1. Node rank 0's host (whose agent serves the workers' store,
#     MASTER_ADDR) loses its link without a word: the two survivors, whose
#     members keep a quorum of 2 of 3, see its heartbeat lapse and re-form
#     at world size 2 with node rank 0 and MASTER_ADDR on a survivor (the
#     one whose rank, 2, the smaller group lacks: the other keeps its rank
#     1, and so its workers theirs), resume from the newest state a survivor holds, in its agent's memory
#     or its own --ckpt-dir (at most the step under way is lost, though
#     rank 0 was on the lost host) and finish with exit 0.
#  2. The cut-off host's agent does not hang: its member has lost quorum
#     and no other answers, so it exits non-zero naming etcd, and nothing
#     of the job is left running on that host.
#  3. The link back and a new job on the same cluster: a 1 s outage of node
#     rank 0's host, inside the heartbeat, restarts nothing.
#  4. A second cluster, on hosts 2, 3 and a fourth host that runs nothing
#     but its member, listed first (the one every agent talks to): that
#     host lost without a word, the agents fail over to the other members
#     within their heartbeat, nothing restarts and the job finishes.
source "$(dirname "$0")/../lib/agent.bash"
source "$(dirname "$0")/../lib/etcd.bash"
source "$(dirname "$0")/../lib/netbed.bash"
netbed_up 4
etcd_bed_cluster 1 2 3
EP=$ETCD_ENDPOINTS

# The worker: records what ddprun gave it, trains, and with HOLD set
# stays until the file HOLD exists (the agents stay in the job meanwhile).
mkdir -p "$TMP/ckpt"
cat > "$TMP/train.sh" <<'EOF'
#!/bin/sh
echo "host=$(hostname) RANK=$RANK WORLD_SIZE=$WORLD_SIZE GROUP_RANK=$GROUP_RANK MASTER_ADDR=$MASTER_ADDR RESTART=$TORCHELASTIC_RESTART_COUNT JOB=$TORCHELASTIC_RUN_ID" >> "$REC"
[ -n "$HOLD" ] || exec ddp-train "$@"
ddp-train "$@" || exit
while [ ! -e "$HOLD" ]; do sleep 0.1; done
EOF
chmod +x "$TMP/train.sh"
args=(--model resnet20 --data synthetic --input-shape 3x16x16 --synthetic-size 200000 --threads 1
      --no-eval --log-every 1 --batch-size 8 --ckpt-every 5 --seed 3 --snapshot-every 1)
# job NAME MAX_STEPS: one agent on each of hosts 1 to 3, on etcd at $EP.
job() {
    local name=$1 steps=$2 h
    for h in 1 2 3; do
        netbed_exec "$h" env DDPRUN_TEST_TAG="$TAG" REC="$TMP/rec.$name" HOLD="${HOLD:-}" ddprun --nnodes=2:3 \
            --nproc-per-node=1 --max-restarts=3 --rdzv-backend=etcd-v3 --rdzv-endpoint="$EP" \
            --rdzv-id="$name" --no-python "$TMP/train.sh" "${args[@]}" --max-steps "$steps" \
            --ckpt-dir "$TMP/ckpt/$name" > "$TMP/$name.h$h.out" 2> "$TMP/$name.h$h.err" &
        PIDS+=($!)
        printf -v "PID_${name}_h$h" %s "$!"
    done
}
# finishes NAME H SECONDS: host H's agent of job NAME exits within SECONDS
# (RC set), or the scenario fails showing every agent of the job.
finishes() {
    local pid=PID_$1_h$2 start
    start=$(now_ms)
    until exited "${!pid}"; do
        [ $(($(now_ms) - start)) -lt $(($3 * 1000)) ] ||
            { dump "$1.h1" "$1.h2" "$1.h3"; die "$1: h$2's agent still runs after $3 s"; }
        sleep 0.05
    done
    wait "${!pid}"
    RC=$?
}
# rec NAME [FROM]: the worker records of a job (from its FROM-th on).
rec() { tail -n +"${2:-1}" "$TMP/rec.$1" 2> /dev/null | sort; }
# nrec NAME N: whether N workers of the job have started.
nrec() { [ "$(rec "$1" | grep -c .)" -ge "$2" ]; }

# 1. Node rank 0's host lost.
job lost 60
for h in 1 2 3; do wait_line 60 "$TMP/lost.h$h.err" "started 1 worker on h$h: node rank [0-2] of 3"; done
lost=$(sed -n 's/.*started 1 worker on h\([0-9]\): node rank 0 of 3.*/\1/p' "$TMP"/lost.h*.err)
[ -n "$lost" ] || { dump lost.h1 lost.h2 lost.h3; die "no agent says it is node rank 0 of 3"; }
wait_for 30 "three workers' records" nrec lost 3
assert_eq "$(rec lost | grep -c "WORLD_SIZE=3 .*MASTER_ADDR=h$lost ")" 3 \
    "first round: three workers at world size 3 meeting at h$lost"
wait_for 60 "step 12 on node rank 0" grep -q "step 12/" "$TMP/lost.h$lost.out"
survivors=()
for h in 1 2 3; do [ "$h" = "$lost" ] || survivors+=("$h"); done
# The survivors keep their node ranks where the group of 2 has them: node
# rank 1 stays, and node rank 2's host takes the free rank 0.
s=$(sed -n 's/.*started 1 worker on h\([0-9]\): node rank 2 of 3.*/\1/p' "$TMP"/lost.h*.err)
keeper=$(sed -n 's/.*started 1 worker on h\([0-9]\): node rank 1 of 3.*/\1/p' "$TMP"/lost.h*.err)
[ -n "$s" ] && [ -n "$keeper" ] || { dump lost.h1 lost.h2 lost.h3; die "no agents say they are node ranks 1 and 2 of 3"; }
steps_before=$(grep -c "step [0-9]*/" "$TMP/lost.h$s.out")
t0=$(now_ms)
netbed_link "$lost" down
# The last step node rank 0 finished (and printed) before it was cut off.
done_before=$(sed -n 's/.* step \([0-9]*\)\/.*/\1/p' "$TMP/lost.h$lost.out" | tail -n 1)
# The new group's first step on a survivor: a step line after its resume.
first_step() { grep -q "resuming from" "$TMP/lost.h$s.out" "$TMP/lost.h$s.err" &&
               [ "$(grep -c "step [0-9]*/" "$TMP/lost.h$s.out")" -gt "$steps_before" ]; }
# Until that step and every agent's exit (survivors and cut-off host
# alike), noting when each came, in ms after the loss.
t_step="" t_end=()
until [ -n "$t_step" ] && [ "${#t_end[@]}" = 3 ]; do
    [ $(($(now_ms) - t0)) -lt 60000 ] || { dump lost.h1 lost.h2 lost.h3
        die "60 s after the loss: first step after ${t_step:-never}, agents out after ${t_end[*]:-none} ms"; }
    [ -n "$t_step" ] || ! first_step || t_step=$(($(now_ms) - t0))
    for h in 1 2 3; do
        pid=PID_lost_h$h
        [ -n "${t_end[$h]:-}" ] || ! exited "${!pid}" || t_end[h]=$(($(now_ms) - t0))
    done
    sleep 0.05
done
[ "$t_step" -le 20000 ] || { dump "lost.h$s"; die "the survivors' first step came $t_step ms after the loss (at most 20000)"; }
for h in "${survivors[@]}"; do
    pid=PID_lost_h$h
    wait_exit 1 "${!pid}"
    assert_rc "lost.h$h" 0
done
# The survivors' workers of the new round: world size 2, ranks 0 and 1,
# node rank 0 and MASTER_ADDR on the survivor that was node rank 2, node
# rank 1 kept by the one that had it.
new=$(rec lost 4)
assert_eq "$(grep -c . <<< "$new")" 2 "workers of the re-formed group ($new)"
assert_eq "$(grep -c "WORLD_SIZE=2 .*MASTER_ADDR=h$s " <<< "$new")" 2 \
    "the re-formed group: world size 2, meeting at survivor h$s ($new)"
assert_eq "$(sed 's/.* RANK=\([0-9]*\) .*/\1/' <<< "$new" | sort | tr '\n' ' ')" "0 1 " \
    "the re-formed group's ranks ($new)"
grep -q "host=h$s RANK=0 .*GROUP_RANK=0 " <<< "$new" || die "node rank 0 did not move to h$s ($new)"
grep -q "node rank 0 of 2, .*(round 1)" "$TMP/lost.h$s.err" || { dump "lost.h$s"; die "h$s never became node rank 0 of 2"; }
grep -q "host=h$keeper RANK=1 .*GROUP_RANK=1 " <<< "$new" || die "h$keeper did not keep node rank 1 ($new)"
from=$(sed -n 's/.*resuming from .*step \([0-9]*\).*/\1/p' "$TMP/lost.h$s.out" "$TMP/lost.h$s.err" | head -n 1)
# Every survivor holds the newest state in its agent's memory (and, at
# checkpoint steps, on its own disk: every node writes its --ckpt-dir): at
# most the step under way when the host went is redone.
[ "${from:-0}" -ge $((done_before - 1)) ] ||
    { dump "lost.h$s"; die "the new group resumed from step ${from:-none}, but step $done_before was done before the loss"; }
grep -Eq "resuming from .*\((memory|disk) of node h[0-9]\)" "$TMP/lost.h$s.out" "$TMP/lost.h$s.err" &&
    ! grep -q "resuming from .* of node h$lost)" "$TMP/lost.h$s.out" "$TMP/lost.h$s.err" ||
    { dump "lost.h$s"; die "the new group did not resume from a survivor's state"; }
grep -q "done: 60 steps" "$TMP/lost.h$s.out" || { dump "lost.h$s"; die "the job did not finish"; }
echo "host h$lost (node rank 0) lost after step $done_before: the survivors resumed from step $from, their first step after $t_step ms, done after ${t_end[$s]} and ${t_end[$keeper]} ms; node rank 0 and MASTER_ADDR now h$s"

# 2. The cut-off host's agent stops on its own, naming etcd.
pid=PID_lost_h$lost
wait_exit 1 "${!pid}"
[ "$RC" -ne 0 ] || { dump "lost.h$lost"; die "the cut-off host's ddprun exited 0"; }
! etcd_bed_healthy "$lost" "h$lost:2379" || die "the cut-off host's etcd member still has a quorum"
assert_grep "$TMP/lost.h$lost.err" "lost the rendezvous: no member of etcd at $EP answers" \
    "the cut-off host's message"
for p in $(tagged_pids); do
    [ "$(ip netns identify "$p" 2> /dev/null)" != "$(netbed_ns "$lost")" ] ||
        die "process $p ($(tr '\0' ' ' < "/proc/$p/cmdline")) is still running on the cut-off host"
done
echo "the cut-off host's agent: exit $RC after ${t_end[$lost]} ms: $(grep -ho "lost the rendezvous.*" "$TMP/lost.h$lost.err" | head -n 1)"

# 3. The link back; a new job; a 1 s outage of node rank 0's host.
netbed_link "$lost" up
wait_for 20 "etcd member m$lost back in the cluster" etcd_bed_healthy "$lost" "h$lost:2379"
job flap 40
for h in 1 2 3; do wait_line 60 "$TMP/flap.h$h.err" "started 1 worker on h$h: node rank [0-2] of 3"; done
r0=$(sed -n 's/.*started 1 worker on h\([0-9]\): node rank 0 of 3.*/\1/p' "$TMP"/flap.h*.err)
wait_for 60 "step 12 on node rank 0" grep -q "step 12/" "$TMP/flap.h$r0.out"
netbed_link "$r0" down
sleep 1
netbed_link "$r0" up
for h in 1 2 3; do
    finishes flap "$h" 60
    assert_rc "flap.h$h" 0
    assert_no_grep "$TMP/flap.h$h.err" "(round 1)|re-forming|heartbeat lapsed" "a 1 s outage on h$r0"
done
grep -q "done: 40 steps" "$TMP/flap.h$r0.out" || { dump "flap.h$r0"; die "the flap job did not finish"; }
assert_eq "$(grep -c . "$TMP/rec.flap")" 3 "workers started for the flap job"
echo "a 1 s outage of node rank 0's host h$r0: nothing restarted, every agent exited 0"

# 4. A member's host alone lost: the one every agent talks to.
etcd_bed_cluster -p 2479 4 2 3
EP=$ETCD_ENDPOINTS
HOLD=$TMP/release job member 120
for h in 1 2 3; do wait_line 60 "$TMP/member.h$h.err" "started 1 worker on h$h: node rank [0-2] of 3"; done
wait_for 60 "step 12 on node rank 0" grep -q "step 12/" "$TMP/member.h1.out"
t0=$(now_ms)
netbed_link 4 down
sleep 7 # longer than a heartbeat lease (5 s)
for h in 1 2 3; do
    pid=PID_member_h$h
    ! exited "${!pid}" || { dump "member.h$h"; die "h$h's agent stopped within 7 s of losing h4"; }
done
grep -q "done: 120 steps" "$TMP/member.h1.out" || { dump member.h1; die "the job did not train on"; }
touch "$TMP/release"
for h in 1 2 3; do
    finishes member "$h" 30
    assert_rc "member.h$h" 0
    assert_no_grep "$TMP/member.h$h.err" "(round 1)|re-forming|heartbeat lapsed" "h4's member lost"
done
assert_eq "$(grep -c . "$TMP/rec.member")" 3 "workers started for the job"
assert_no_leftovers
echo "the host of the member every agent talked to (h4) lost: nothing restarted, done after $(($(now_ms) - t0)) ms"
