#!/usr/bin/env bash
# libcurl is opened only when the etcd rendezvous is used (dlopen), so on a
# machine without it (here: a mount namespace whose libcurl.so.4 is an
# empty file) a c10d job runs as ever, and an etcd one stops at once with
# an error that names libcurl and the package to install. Before, ddprun
# linked libcurl and would not start at all.
# timeout: 60
# shellcheck source=tests/lib/agent.bash
source "$(dirname "$0")/../lib/agent.bash"
unshare --mount --propagation private true 2> /dev/null ||
    skip "skipped: cannot make a mount namespace (needs root)"
curl=$(PATH=$PATH:/sbin:/usr/sbin ldconfig -p | awk '$1 == "libcurl.so.4" && /64/ && !f {print $NF; f = 1}')
[ -n "$curl" ] || skip "skipped: libcurl.so.4 is not installed here (nothing to hide)"
# without_curl CMD...: CMD with libcurl.so.4 an empty file
without_curl() {
    unshare --mount --propagation private \
        bash -c 'mount --bind /dev/null "$0" && exec "$@"' "$(readlink -f "$curl")" "$@"
}

without_curl ddprun --standalone --nproc-per-node 2 --no-python sh -c 'echo "rank $RANK"' \
    > "$TMP/c10d.log" 2>&1 || { cat "$TMP/c10d.log"; die "a c10d job failed without libcurl"; }
assert_eq "$(grep -c '^\[.*rank [01]$\|^rank [01]$' "$TMP/c10d.log")" 2 "the c10d job's workers"

port=$(free_port)
t0=$(date +%s)
without_curl ddprun --nnodes 1 --rdzv-backend etcd-v3 --rdzv-endpoint "127.0.0.1:$port" \
    --no-python /bin/true > "$TMP/etcd.log" 2>&1
rc=$?
cat "$TMP/etcd.log"
[ $rc != 0 ] || die "an etcd job without libcurl succeeded"
[ $((rc)) -lt 128 ] || die "ddprun died of a signal ($rc) without libcurl"
[ $(($(date +%s) - t0)) -lt 10 ] || die "ddprun took $(($(date +%s) - t0)) s to say libcurl is missing"
grep -q "etcd rendezvous needs libcurl, which cannot be loaded (.*libcurl.so.4.*); install it (apt install libcurl4)" \
    "$TMP/etcd.log" || die "the error does not name libcurl and its package"
echo "ok: c10d runs without libcurl; etcd says: $(grep -o 'the etcd rendezvous needs.*' "$TMP/etcd.log")"
