# Shell helpers shared by the store's test scenarios (tests/integration and
# tests/compat): start a ddprun-store on a free loopback port, know its
# port, and stop everything the scenario started, by PID, when it exits.
# Sourced by the scenarios, never run on its own (hence not *.sh, which
# tests/run would take for a scenario).

ROOT=${DDPRUN_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
# Raw-socket clients run on Debian's python3; torch's own clients on
# TORCH_PY (lib/torch.bash).
PY=/usr/bin/python3
# shellcheck disable=SC2034 # used by the scenarios that source this file
STORE_LOAD=$ROOT/build/tests/store-load
# A token in the caller's environment would make the server demand a
# handshake that raw-socket and torch clients never send.
unset DDPRUN_STORE_TOKEN
TMP=$(mktemp -d /tmp/ddprun-test.XXXXXX)
PIDS=()

cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

skip() { echo "$*"; exit 77; }
die() { echo "FAIL: $*" >&2; exit 1; }

# start_store NAME HOST [ARGS...]: runs ddprun-store in the background with
# its stderr in $TMP/NAME.err and sets STORE_PID and STORE_PORT once it has
# printed "listening on HOST:PORT".
start_store() {
    local name=$1 host=$2
    shift 2
    command -v ddprun-store > /dev/null || die "ddprun-store is not built (run make)"
    ddprun-store --host "$host" --port 0 "$@" 2> "$TMP/$name.err" &
    STORE_PID=$!
    PIDS+=("$STORE_PID")
    for _ in $(seq 100); do
        STORE_PORT=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$TMP/$name.err" | head -n1)
        [ -n "$STORE_PORT" ] && return 0
        kill -0 "$STORE_PID" 2>/dev/null || break
        sleep 0.1
    done
    cat "$TMP/$name.err" >&2
    die "ddprun-store ($name) did not report its port"
}

# shellcheck source=tests/lib/torch.bash
. "$ROOT/tests/lib/torch.bash"
