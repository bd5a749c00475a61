#!/usr/bin/env bash
# --numa-binding (torchrun 2.x): each worker is bound to CPUs chosen from
# the machine's topology (hwloc). On this machine, without GPUs: exclusive
# gives the workers whole cores apart from each other and the workers run
# bound to them (Cpus_allowed_list); node gives each its node's CPUs; more
# workers than cores under exclusive is refused, naming the node. On a
# recorded topology (tests/fixtures/numa_4gpu.xml: 2 sockets, each one
# NUMA node, two L3 domains of 4 two-thread cores and two NVIDIA GPUs),
# the plan follows each worker's GPU, CUDA_VISIBLE_DEVICES included; it is
# reported there, not applied (it is not this machine's).
# timeout: 40
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
cat > "$TMP/aff.sh" <<'SH'
#!/bin/sh
echo "local rank $LOCAL_RANK runs on $(grep Cpus_allowed_list /proc/self/status | cut -f2)"
SH
chmod +x "$TMP/aff.sh"
ncpu=$(nproc)
[ "$ncpu" -ge 2 ] || skip "skipped: needs 2 CPUs to bind two workers apart (this machine has $ncpu)"

# This machine: the workers run where the plan says.
start_ddprun x --standalone --nproc-per-node=2 --numa-binding exclusive --no-python "$TMP/aff.sh"
wait_exit 15 "$PID_x"
assert_rc x 0
for r in 0 1; do
    planned=$(sed -n "s/.*--numa-binding exclusive: local rank $r on CPUs \([^ ]*\) .*/\1/p" "$TMP/x.err")
    [ -n "$planned" ] || { cat "$TMP/x.err"; die "no plan line for local rank $r"; }
    assert_grep "$TMP/x.out" "^local rank $r runs on $planned\$" "local rank $r bound to its plan"
done
p0=$(sed -n 's/^local rank 0 runs on //p' "$TMP/x.out")
p1=$(sed -n 's/^local rank 1 runs on //p' "$TMP/x.out")
[ "$p0" != "$p1" ] || die "exclusive gave both workers the same CPUs ($p0)"
start_ddprun n --standalone --nproc-per-node=2 --numa-binding node --no-python "$TMP/aff.sh"
wait_exit 15 "$PID_n"
assert_rc n 0
assert_eq "$(sed -n 's/^local rank 1 runs on //p' "$TMP/n.out")" \
    "$(grep Cpus_allowed_list /proc/self/status | cut -f2)" "node: all of the (one) node's CPUs"
start_ddprun m --standalone --nproc-per-node=$((ncpu + 1)) --numa-binding exclusive \
    --no-python "$TMP/aff.sh"
wait_exit 15 "$PID_m"
assert_rc m 1
assert_grep "$TMP/m.err" "exclusive: $((ncpu + 1)) workers share NUMA node .*, which has only" \
    "too many workers for exclusive"

# A recorded topology with GPUs: the plan per mode.
export HWLOC_XMLFILE=$ROOT/tests/fixtures/numa_4gpu.xml
plan() { # MODE NPROC: the plan's "rank:cpus" pairs
    local name=p$RANDOM
    start_ddprun "$name" --standalone --nproc-per-node="$2" --numa-binding "$1" --no-python true
    wait_exit 15 "$LAST_PID"
    sed -n "s/.*--numa-binding $1: local rank \([0-9]*\) on CPUs \([^ ]*\) .*/\1:\2/p" \
        "$TMP/$name.err" | tr '\n' ' '
}
assert_eq "$(plan node 4)" "0:0-15 1:0-15 2:16-31 3:16-31 " "node: each GPU's socket's node"
assert_eq "$(plan exclusive 4)" "0:0-7 1:8-15 2:16-23 3:24-31 " "exclusive: the node's cores split"
assert_eq "$(plan core-complex 4)" "0:0-7 1:8-15 2:16-23 3:24-31 " "core-complex: an L3 each"
assert_eq "$(CUDA_VISIBLE_DEVICES=3,1 plan exclusive 2)" "0:16-31 1:0-15 " \
    "CUDA_VISIBLE_DEVICES=3,1: GPU 3 on socket 1, GPU 1 on socket 0"
assert_eq "$(plan node 8)" "0:0-15 1:0-15 2:0-15 3:0-15 4:16-31 5:16-31 6:16-31 7:16-31 " \
    "more workers than GPUs: the nodes shared out"
assert_grep "$TMP/$(ls -t "$TMP" | grep '\.err$' | head -n1)" "not this machine's" \
    "the plan of a recorded topology is not applied"
echo "--numa-binding: bound as planned here; planned by GPU on the recorded topology"
