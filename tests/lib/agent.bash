# Shell helpers shared by the launcher and agent scenarios
# (tests/integration/agent_*.sh, tests/compat/torch_ddp_agents.sh): free
# ports, starting ddprun in the background with its output in files,
# waiting for a line or an exit with a deadline, assertions, and finding
# the processes a scenario left behind. Sourced by the scenarios, never run
# on its own (hence not *.sh, which tests/run would take for a scenario).
#
# Every ddprun a scenario starts gets DDPRUN_TEST_TAG=<this scenario's
# temporary directory> in its environment; its workers (and anything they
# start) inherit it, so `tagged_pids` finds every process the scenario
# caused, however deep, by reading /proc/*/environ. The scenario's own
# shell does not carry the tag, so it never finds itself.

ROOT=${DDPRUN_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
export PATH="$ROOT/build/bin:$PATH"
# shellcheck disable=SC2034 # used by the scenarios
WORKERS=$ROOT/tests/workers
# A token in the caller's environment would make the agents' stores
# demand a handshake.
unset DDPRUN_STORE_TOKEN
# The scenarios decide these themselves; an inherited one would change them.
unset OMP_NUM_THREADS PYTHON_EXEC
for v in $(env | sed -n 's/^\(PET_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
TMP=$(mktemp -d /tmp/ddprun-agent-test.XXXXXX)
TAG=$TMP
PIDS=()

skip() { echo "$*"; exit 77; }
die() {
    echo "FAIL: $*" >&2
    exit 1
}

# The PIDs of live (not zombie) processes carrying this scenario's tag.
tagged_pids() {
    local f pid state
    for f in /proc/[0-9]*/environ; do
        pid=${f#/proc/}
        pid=${pid%/environ}
        grep -qzx "DDPRUN_TEST_TAG=$TAG" "$f" 2> /dev/null || continue
        state=$(awk '{print $3}' "/proc/$pid/stat" 2> /dev/null) || continue
        [ "$state" = Z ] || [ -z "$state" ] || echo "$pid"
    done
}

cleanup() {
    local p left
    # SHOW=1 (running a scenario by hand) prints every ddprun's stderr.
    if [ -n "${SHOW:-}" ]; then tail -n +1 "$TMP"/*.err >&2; fi
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2> /dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2> /dev/null; done
    # Whatever a failed scenario left behind (workers of a killed agent).
    left=$(tagged_pids)
    for p in $left; do kill -KILL "$p" 2> /dev/null; done
    # The logs an agent without --log-dir kept because a worker failed.
    for p in "${PIDS[@]}"; do rm -rf /tmp/ddprun_"$p"_*; done
    rm -rf "$TMP"
}
trap cleanup EXIT
# A scenario stopped by tests/run's timeout still cleans up.
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

# A port nobody listens on now (the kernel picks it).
free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_ddprun NAME [ARGS...]: runs ddprun ARGS in the background with
# stdout in $TMP/NAME.out and stderr in $TMP/NAME.err; sets LAST_PID and
# remembers it for cleanup (as PID_<NAME> too).
start_ddprun() {
    local name=$1
    shift
    DDPRUN_TEST_TAG=$TAG ddprun "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
    printf -v "PID_$name" %s "$LAST_PID"
}

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 50 ms until
# it succeeds; fails the scenario after SECONDS.
wait_for() {
    local secs=$1 what=$2 start
    shift 2
    start=$(now_ms)
    until "$@" 2> /dev/null; do
        [ $(($(now_ms) - start)) -lt $((secs * 1000)) ] || die "timed out after $secs s waiting for $what"
        sleep 0.05
    done
}

# wait_line SECONDS FILE REGEX: waits until FILE has a line matching REGEX.
wait_line() {
    wait_for "$1" "a line matching '$3' in $(basename "$2")" grep -qE -- "$3" "$2"
}

# Whether PID has exited (gone or a zombie waiting for us).
exited() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2> /dev/null) || return 0
    [ -z "$state" ] || [ "$state" = Z ]
}

# worker_pid AGENT_PID VAR=VALUE: the pid of the agent's worker whose
# environment holds VAR=VALUE (RANK=1, LOCAL_RANK=0), by its environment
# rather than whichever child comes first; "" if none.
worker_pid() {
    local p found=""
    for p in $(pgrep -P "$1"); do
        tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "$2" && found=$p
    done
    echo "$found"
}

# wait_exit SECONDS PID: waits for our child PID to exit and sets RC to its
# exit status; fails the scenario if it still runs after SECONDS.
wait_exit() {
    wait_for "$1" "pid $2 (ddprun) to exit" exited "$2"
    # (2> /dev/null: no "Killed" notice for an agent a scenario killed)
    wait "$2" 2> /dev/null
    RC=$?
}

# wait_all_rc SECONDS RC NAME...: each named ddprun (start_ddprun's PID_NAME)
# exits within SECONDS, with RC.
wait_all_rc() {
    local t=$1 rc=$2 n pid
    shift 2
    for n in "$@"; do
        pid=PID_$n
        wait_exit "$t" "${!pid}"
        assert_rc "$n" "$rc"
    done
}

# Milliseconds since the epoch, for measuring how long something took.
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# Shows a ddprun's output (for the failure message) and fails.
dump() {
    local n
    for n in "$@"; do
        echo "---- $n stdout" >&2
        tail -n 40 "$TMP/$n.out" >&2
        echo "---- $n stderr" >&2
        tail -n 40 "$TMP/$n.err" >&2
    done
}

# assert_eq ACTUAL EXPECTED WHAT
assert_eq() {
    [ "$1" = "$2" ] || die "$3: expected '$2', got '$1'"
}

# assert_rc NAME EXPECTED: RC (from wait_exit) must be EXPECTED; shows
# NAME's output otherwise.
assert_rc() {
    if [ "$RC" != "$2" ]; then
        dump "$1"
        die "ddprun ($1) exited $RC, expected $2"
    fi
}

# assert_grep FILE REGEX WHAT: FILE must have a line matching REGEX (grep -E).
assert_grep() {
    grep -qE -- "$2" "$1" || {
        echo "---- $1" >&2
        tail -n 60 "$1" >&2
        die "$3: no line matching '$2' in $(basename "$1")"
    }
}

# assert_no_grep FILE REGEX WHAT
assert_no_grep() {
    ! grep -qE -- "$2" "$1" || {
        grep -nE -- "$2" "$1" | head -n 5 >&2
        die "$3: unexpected line matching '$2' in $(basename "$1")"
    }
}

# assert_no_leftovers [SECONDS]: no process of this scenario may remain
# (it waits up to SECONDS, default 3, for exits already under way).
assert_no_leftovers() {
    local secs=${1:-3} left start
    start=$(now_ms)
    while :; do
        left=$(tagged_pids)
        [ -z "$left" ] && return 0
        [ $(($(now_ms) - start)) -ge $((secs * 1000)) ] && break
        sleep 0.1
    done
    for p in $left; do ps -o pid=,ppid=,stat=,args= -p "$p" >&2; done
    die "processes left behind: $(tr '\n' ' ' <<< "$left")"
}

# The worker records (see tests/workers/worker.sh), one line per worker
# start: "pid=.. host_pid=.. KEY=VALUE ..." in $TMP/rec/<pid>.
records() { cat "$TMP"/rec/* 2> /dev/null; }
# field LINE KEY: the value of KEY in one record line.
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<< " $1"; }
# count_records REGEX: how many records match REGEX.
count_records() { records | grep -cE -- "$1"; }
# nrecords_at_least N: whether at least N workers have written a record.
nrecords_at_least() { [ "$(find "$TMP/rec" -maxdepth 1 -type f -name '[0-9]*' 2> /dev/null | wc -l)" -ge "$1" ]; }
# store_up PORT: whether a store answers on 127.0.0.1:PORT.
store_up() { ddprun-store-cli --port "$1" --connect-timeout 100 ping > /dev/null 2>&1; }
# check_lines FILE PREFIX STREAM N LEN: FILE's lines of STREAM (O or E)
# from tests/workers/worker.sh's W_LINES must be whole: PREFIX (a regex
# with the rank as its only group, "" for none) then "W<rank> STREAM <i> "
# then LEN copies of the rank's last digit. Prints "<rank>:<count>" for
# each rank seen, in rank order; fails on a broken or mixed line. Lines
# that are not such output (ddprun's own log, other worker lines) are
# ignored if they start with neither PREFIX nor "W".
check_lines() {
    local file=$1 prefix=$2 stream=$3 n=$4 len=$5
    awk -v pre="$prefix" -v st="$stream" -v len="$len" -v file="$(basename "$file")" '
        function bad(why) { printf "%s line %d: %s: %.120s...\n", file, NR, why, $0 > "/dev/stderr"; nbad++ }
        {
            line = $0; r = ""
            if (pre != "") {
                if (!match(line, "^" pre)) next
                p = substr(line, 1, RLENGTH); line = substr(line, RLENGTH + 1)
                r = p; gsub(/[^0-9]/, "", r)
            } else if (line !~ /^W/) next
            if (line !~ "^W[0-9]+ " st " ") {
                if (line ~ /^W[0-9]+ [OE] / || pre == "") { bad("wrong stream or mangled") }
                next
            }
            split(line, f, " ")
            wr = substr(f[1], 2)
            if (r != "" && wr != r) { bad("prefix says rank " r ", line is from rank " wr); next }
            d = substr(wr, length(wr))
            if (length(f[4]) != len || f[4] !~ ("^" d "+$") || NF != 4) { bad("broken line"); next }
            cnt[wr]++
            if (f[3] != seen[wr] + 0) { bad("rank " wr " line " f[3] " out of order"); }
            seen[wr] = f[3] + 1
        }
        END {
            for (k in cnt) printf "%s:%d\n", k, cnt[k] | "sort -n"
            exit nbad > 0
        }' "$file" || die "$(basename "$file"): broken or interleaved lines (see above)"
}
