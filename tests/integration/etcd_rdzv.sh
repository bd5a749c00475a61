#!/usr/bin/env bash
# The etcd-v3 rendezvous backend against a real etcd (one member, loopback):
#  - two agents form a job (torchrun's "etcd" spelling is taken and says it
#    speaks v3); the workers meet at node rank 0's own store;
#  - two jobs with different --rdzv-id on the same etcd never meet;
#  - ddp-train on two agents, then kill -9 of node rank 0's agent (its host's
#    store goes with it): the survivor re-forms alone, its own store now the
#    workers', resumes from the checkpoint and finishes;
#  - etcd stopped under a running job: the agents exit 1 naming etcd, and
#    nothing is left running.
# timeout: 120
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
# shellcheck source=tests/lib/etcd.bash
source "$(dirname "$0")/../lib/etcd.bash"
etcd_cluster 1
EP=$ETCD_ENDPOINTS
mkdir -p "$TMP/rec"

# Two agents, one job; a second job beside it.
for n in a b; do
    W_REC=$TMP/rec start_ddprun "$n" --nnodes=2 --nproc-per-node=2 --rdzv-backend=etcd \
        --rdzv-endpoint="$EP" --rdzv-id=job1 --no-python "$WORKERS/worker.sh"
done
W_REC=$TMP/rec start_ddprun other --nnodes=1 --nproc-per-node=1 --rdzv-backend=etcd-v3 --rdzv-endpoint="$EP" \
    --rdzv-id=job2 --no-python "$WORKERS/worker.sh"
for n in a b other; do
    pid=PID_$n
    wait_exit 30 "${!pid}"
    assert_rc "$n" 0
done
assert_grep "$TMP/a.err" "etcd: ddprun speaks etcd's v3 API to $EP" "the etcd spelling, said"
assert_eq "$(records | wc -l)" 5 "workers of both jobs"
assert_eq "$(count_records 'WORLD_SIZE=4 ')" 4 "job1's workers, world 4"
assert_eq "$(count_records 'TORCHELASTIC_RUN_ID=job2 .*' )" 1 "job2's worker"
assert_eq "$(records | grep 'RUN_ID=job1' | sed 's/.* \(MASTER_ADDR=[^ ]*\) \(MASTER_PORT=[^ ]*\).*/\1 \2/' | sort -u | wc -l)" 1 \
    "one MASTER_ADDR:MASTER_PORT for job1"
echo "two agents formed job1 beside job2; the workers met at node rank 0's store"

# ddp-train; node rank 0's agent killed.
args=(--data synthetic --input-shape 3x16x16 --synthetic-size 100000 --threads 1 --no-eval
      --log-every 1 --batch-size 8 --ckpt-dir "$TMP/ck" --ckpt-every 5 --max-steps 400)
for n in t1 t2; do
    start_ddprun "$n" --nnodes=1:2 --nproc-per-node=1 --max-restarts=3 --rdzv-backend=etcd-v3 \
        --rdzv-endpoint="$EP" --rdzv-id=train --rdzv-conf=last_call_timeout=2 \
        --no-python ddp-train "${args[@]}"
done
wait_line 30 "$TMP/t1.err" "started 1 worker on .*node rank [01] of 2"
wait_line 30 "$TMP/t2.err" "started 1 worker on .*node rank [01] of 2"
if grep -q "node rank 0 of 2" "$TMP/t1.err"; then lost=t1 survivor=t2; else lost=t2 survivor=t1; fi
wait_for 30 "step 20 on node rank 0" grep -q "step 20/" "$TMP/$lost.out" "$TMP/$lost.err"
pid=PID_$lost
kill -KILL "${!pid}"
t0=$(now_ms)
spid=PID_$survivor
wait_exit 60 "${!spid}"
assert_rc "$survivor" 0
grep -q "node rank 0 of 1" "$TMP/$survivor.err" || { dump "$survivor"; die "the survivor did not re-form alone"; }
cat "$TMP/$survivor.out" "$TMP/$survivor.err" > "$TMP/survivor.log"
grep -q "resuming from" "$TMP/survivor.log" || { dump "$survivor"; die "no resume"; }
grep -q "step 400/" "$TMP/survivor.log" || { dump "$survivor"; die "did not finish"; }
echo "node rank 0's agent killed: the survivor re-formed alone and finished ($(( $(now_ms) - t0 )) ms)"

# etcd gone under a running job.
for n in g1 g2; do
    W_HOLD=true start_ddprun "$n" --nnodes=2 --nproc-per-node=1 --rdzv-backend=etcd-v3 \
        --rdzv-endpoint="$EP" --rdzv-id=gone --no-python "$WORKERS/worker.sh"
done
wait_line 30 "$TMP/g1.err" "started 1 worker"
wait_line 30 "$TMP/g2.err" "started 1 worker"
kill -KILL "$ETCD_PID_1"
for n in g1 g2; do
    pid=PID_$n
    wait_exit 40 "${!pid}"
    assert_rc "$n" 1
    assert_grep "$TMP/$n.err" "lost the rendezvous: no member of etcd at $EP answers" "the message"
done
assert_no_leftovers
echo "etcd stopped: both agents exited 1 naming it, nothing left"
