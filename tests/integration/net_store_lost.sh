#!/usr/bin/env bash
# timeout: 150
# The host that runs the rendezvous store is lost without a word (its link
# taken down) from a job on three test hosts (tests/lib/netbed.bash). The
# c10d backend cannot go on without its store: every survivor's ddprun
# exits non-zero within read_timeout (60 s), with a message that names the
# store and says so, and leaves no process behind on its host.
source "$(dirname "$0")/../lib/agent.bash"
source "$(dirname "$0")/../lib/netbed.bash"
netbed_up 3
port=29618
args=(--model resnet20 --data synthetic --input-shape 3x16x16 --synthetic-size 200000 --threads 1
      --no-eval --log-every 1 --batch-size 8 --ckpt-every 5 --seed 3)
netbed_elastic storelost "$port" "${args[@]}"
wait_line 60 "$TMP/storelost.h1.out" "step 12/"
t0=$(now_ms)
netbed_link 1 down
for h in 2 3; do
    pid=PID_storelost_h$h
    wait_exit 60 "${!pid}"
    [ "$RC" -ne 0 ] || { dump "storelost.h$h"; die "host $h's ddprun exited 0 without its store"; }
    grep -q "lost the rendezvous: the store at $(netbed_addr 1):$port does not answer .*cannot go on without it" \
        "$TMP/storelost.h$h.err" || { dump "storelost.h$h"; die "host $h's message does not name the store"; }
    echo "host $h: exit $RC after $(($(now_ms) - t0)) ms"
done
for p in $(tagged_pids); do
    ns=$(ip netns identify "$p" 2> /dev/null)
    [ "$ns" != "$(netbed_ns 2)" ] && [ "$ns" != "$(netbed_ns 3)" ] ||
        die "process $p ($(tr '\0' ' ' < "/proc/$p/cmdline")) is still running on a survivor"
done
grep -h "error" "$TMP/storelost.h2.err" | head -n 1
