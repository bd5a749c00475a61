#!/usr/bin/env bash
# ddprun-store --stats-every: a line of counters each period, which the
# scale benchmark reads: the requests a load made (and their rate), the
# connections open, the keys held.
# timeout: 60
set -u
# shellcheck source=tests/lib/store.bash
. "$(dirname "$0")/../lib/store.bash"
[ -x "$STORE_LOAD" ] || die "$STORE_LOAD is not built (run make)"
start_store store 127.0.0.1 --stats-every 1
"$STORE_LOAD" bench --host 127.0.0.1 --port "$STORE_PORT" --conns 2 --seconds 0.3 --op add > "$TMP/load.out" ||
    die "store-load failed: $(cat "$TMP/load.out")"
# Two lines after the load: the later one counts every request of it.
for _ in $(seq 50); do
    [ "$(grep -c 'stats:' "$TMP/store.err")" -ge 2 ] && break
    sleep 0.1
done
line=$(grep 'stats:' "$TMP/store.err" | tail -n 1)
[ -n "$line" ] || { cat "$TMP/store.err"; die "no stats line in 5 s"; }
echo "$line"
requests=$(sed -n 's/.*stats: \([0-9]*\) requests (\([0-9]*\)\/s).*/\1/p' <<< "$line")
[ -n "$requests" ] && [ "$requests" -gt 100 ] || die "the stats line counts ${requests:-no} requests after a 0.3 s load"
grep -q " 0 connections open (2 accepted, 0 dropped)" <<< "$line" ||
    die "the stats line does not count the load's 2 connections, closed: $line"
grep -Eq " [1-9][0-9]* keys$" <<< "$line" || die "the stats line counts no key: $line"
