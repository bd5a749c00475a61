#!/usr/bin/env bash
# timeout: 240
# A slow, lossy network (tc netem: 50 ms delay and 1% loss on every test
# host's interface, so 100 ms round trips) under an elastic job on three
# test hosts (tests/lib/netbed.bash): the job finishes in its first round,
# with no host declared lost and no restart. Skips where the kernel has no
# sch_netem.
source "$(dirname "$0")/../lib/agent.bash"
source "$(dirname "$0")/../lib/netbed.bash"
netbed_up 3
for h in 1 2 3; do
    netbed_netem "$h" delay 50ms loss 1% ||
        skip "skipped: tc netem is not available here (the kernel cannot load sch_netem)"
done
port=29619
args=(--model resnet20 --data synthetic --input-shape 3x16x16 --synthetic-size 200000 --threads 1
      --no-eval --log-every 1 --batch-size 8 --max-steps 30 --seed 3)
netbed_elastic slow "$port" "${args[@]}"
for h in 1 2 3; do
    pid=PID_slow_h$h
    wait_exit 200 "${!pid}"
    assert_rc "slow.h$h" 0
done
grep -q "done: 30 steps" "$TMP/slow.h1.out" || { dump slow.h1; die "the job did not finish"; }
! grep -q "(round 1)" "$TMP/slow.h1.err" || { dump slow.h1; die "the slow network caused a restart"; }
grep "done" "$TMP/slow.h1.out"
