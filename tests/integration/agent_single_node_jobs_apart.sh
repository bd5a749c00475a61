#!/usr/bin/env bash
# Two plain single-node jobs on one machine (`ddprun --nproc-per-node 1`,
# no --standalone, no --master-port): each gets its own store on a free
# port and says which, both run their workers at the same time (the second
# must not join the first one's rendezvous as a spare), and both exit 0.
# With --master-port the store stays where the user put it.
# timeout: 30
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
export W_REC=$TMP/rec W_HOLD="[ ! -e $TMP/go ]"
start_ddprun a --nproc-per-node 1 --no-python "$WORKERS/worker.sh"
start_ddprun b --nproc-per-node 1 --no-python "$WORKERS/worker.sh"
wait_for 15 "both jobs' workers to start" nrecords_at_least 2
touch "$TMP/go"
wait_exit 15 "$PID_a"; assert_rc a 0
wait_exit 15 "$PID_b"; assert_rc b 0
ports=$(records | while read -r l; do field "$l" MASTER_PORT; done | sort -u | wc -l)
assert_eq "$ports" 2 "distinct MASTER_PORTs of the two jobs"
for j in a b; do
    assert_grep "$TMP/$j.err" "single-node job without --master-port: its store is on a free port, 127.0.0.1:[0-9]+" "job $j's store line"
done
rm -f "$TMP"/rec/* "$TMP/go"
port=$(free_port)
start_ddprun c --nproc-per-node 1 --master-port "$port" --no-python "$WORKERS/worker.sh"
wait_for 15 "job c's worker to start" nrecords_at_least 1
touch "$TMP/go"
wait_exit 15 "$PID_c"; assert_rc c 0
assert_eq "$(field "$(records)" MASTER_PORT)" "$port" "MASTER_PORT with --master-port"
echo "two single-node jobs on ports of their own; --master-port kept"
