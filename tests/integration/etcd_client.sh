#!/usr/bin/env bash
# The etcd v3 client (rendezvous/etcd_client.c, over etcd's JSON gateway)
# against a real etcd: every call with its result checked (put, get,
# compare-and-swap on revisions, prefixes, binary values, leases with
# keepalive, time to live, revoke and expiry, watches), through a member list whose first
# member is dead (failover), through a member out of reach for longer than
# a request's timeout (waited for), on a three-member cluster with one
# member killed (unnoticed), and with etcd's authentication: a wrong password is
# refused with a message naming the user, by ddprun too.
# timeout: 90
# shellcheck source=tests/lib/agent.bash
source "$(dirname "$0")/../lib/agent.bash"
# shellcheck source=tests/lib/etcd.bash
source "$(dirname "$0")/../lib/etcd.bash"
CHECK=$ROOT/build/tests/etcd-check

etcd_cluster 3
dead=127.0.0.1:$(free_port)
"$CHECK" "$dead,$ETCD_ENDPOINTS" > "$TMP/check1.out" 2>&1 || { cat "$TMP/check1.out"; die "the API"; }
grep -q "^talked to 127.0.0.1:$ETCD_PORT_1$" "$TMP/check1.out" || {
    cat "$TMP/check1.out"; die "did not fail over past the dead member"; }
cat "$TMP/check1.out"

# The only member listed stopped for longer than a request's timeout (2 s):
# a request made meanwhile waits for it, as through an election.
"$CHECK" "127.0.0.1:$ETCD_PORT_2" --outage "$ETCD_PID_2" 5000 > "$TMP/check5.out" 2>&1 ||
    { cat "$TMP/check5.out"; die "a member out of reach for 5 s"; }
grep "stopped for" "$TMP/check5.out"

# One member killed: the client goes on with the others.
kill -KILL "$ETCD_PID_1"
"$CHECK" "$ETCD_ENDPOINTS" > "$TMP/check2.out" 2>&1 || { cat "$TMP/check2.out"; die "one member down"; }
grep -q "^talked to 127.0.0.1:\($ETCD_PORT_2\|$ETCD_PORT_3\)$" "$TMP/check2.out" || {
    cat "$TMP/check2.out"; die "not on a live member"; }
echo "one of three members killed: the client went on with the others"

# Authentication.
export ETCDCTL_API=3
ep=127.0.0.1:$ETCD_PORT_2
etcdctl --endpoints "$ep" user add root:sesame > /dev/null 2>&1 || die "cannot add a user"
etcdctl --endpoints "$ep" auth enable > /dev/null 2>&1 || die "cannot enable authentication"
"$CHECK" "$ep" --user root --password sesame > "$TMP/check3.out" 2>&1 ||
    { cat "$TMP/check3.out"; die "with the right password"; }
"$CHECK" "$ep" --user root --password wrong --expect-refused > "$TMP/check4.out" 2>&1 ||
    { cat "$TMP/check4.out"; die "with a wrong password"; }
cat "$TMP/check4.out"
# ddprun itself with the wrong password: exit 1, the user named.
start_ddprun bad --nnodes=1 --rdzv-backend=etcd-v3 --rdzv-endpoint="$ep" \
    --rdzv-conf=user=root,password=wrong --no-python true
wait_exit 20 "$LAST_PID"
assert_rc bad 1
assert_grep "$TMP/bad.err" "cannot use etcd at $ep for the rendezvous: etcd refused user 'root'" \
    "ddprun's message for a wrong password"
start_ddprun good --nnodes=1 --rdzv-backend=etcd-v3 --rdzv-endpoint="$ep" \
    --rdzv-conf=user=root,password=sesame --no-python true
wait_exit 20 "$LAST_PID"
assert_rc good 0
echo "etcd client: API, failover, a lost member and authentication checked"
