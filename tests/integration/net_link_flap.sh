#!/usr/bin/env bash
# timeout: 240
# A link that goes down and comes back, on three test hosts
# (tests/lib/netbed.bash), in an elastic job (--nnodes=2:3, two workers
# each, default heartbeat of 2 s):
#  1. back within 1 s, inside the heartbeat window: TCP retransmits, no
#     node is declared lost, the job finishes in its first round;
#  2. back after 7 s: the survivors have re-formed without the host; its
#     agent finds its heartbeat lapsed and rejoins as a new node, the
#     group scales back up to three hosts (six ranks) at the next round and
#     the job finishes, every agent exiting 0; each restart does at most
#     the step under way again.
source "$(dirname "$0")/../lib/agent.bash"
source "$(dirname "$0")/../lib/netbed.bash"
netbed_up 3
args=(--model resnet20 --data synthetic --input-shape 3x16x16 --synthetic-size 200000 --threads 1
      --no-eval --log-every 1 --batch-size 8 --ckpt-every 5 --snapshot-every 1 --max-steps 300 --seed 3)
job() { netbed_elastic "$1" "$2" "${args[@]}"; } # name port
finish() { # name: every agent exits 0
    local h pid
    for h in 1 2 3; do
        pid=PID_$1_h$h
        wait_exit 120 "${!pid}"
        assert_rc "$1.h$h" 0
    done
    grep -q "done: 300 steps" "$TMP/$1.h1.out" || { dump "$1.h1"; die "$1: the job did not finish"; }
}

job brief 29615
wait_line 60 "$TMP/brief.h1.out" "step 12/"
netbed_link 3 down
sleep 1
netbed_link 3 up
finish brief
! grep -q "(round 1)" "$TMP/brief.h1.err" || { dump brief.h1; die "a 1 s outage restarted the group"; }
echo "1 s outage: no restart"

job long 29616
wait_line 60 "$TMP/long.h1.out" "step 12/"
netbed_link 3 down
wait_line 20 "$TMP/long.h1.err" "node rank 0 of 2, .*(round 1)"
sleep 2
netbed_link 3 up
finish long
grep -q "rejoins as a new node" "$TMP/long.h3.err" || { dump long.h3; die "host 3 did not rejoin"; }
grep -q "node rank 0 of 3, global ranks 0-1 of 6, .*(round 2)" "$TMP/long.h1.err" ||
    { dump long.h1; die "the group did not scale back up to three hosts"; }
netbed_redone long.h1 2 # two restarts: down to two hosts, back to three
echo "7 s outage: $(grep -c "(round" "$TMP/long.h1.err") rounds, back to 6 ranks"
