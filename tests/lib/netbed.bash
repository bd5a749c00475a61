# The network test bed: N test hosts on one machine, each a network
# namespace with its own address, joined by veth pairs to a bridge, so that
# a scenario can take a host's link down (a silent loss: no FIN, no RST),
# slow it down or make it lossy (tc netem), which loopback cannot do.
#
#   source tests/lib/netbed.bash      (after agent.bash or train.bash)
#   netbed_up 3                       hosts 1..3 at 10.77.0.1 .. 10.77.0.3
#   netbed_exec 2 ddprun ... &        runs a command on host 2 ($!: its PID)
#   netbed_run 2 cmd                  runs one there and waits for it
#   netbed_link 2 down|up             its link to the bridge
#   netbed_netem 2 delay 50ms loss 1% (tc netem on host 2's interface)
#
# Each command run on host I sees host name "hI" (a UTS namespace of its
# own), so host detection tells the hosts apart with no override; the
# names resolve on every host (an /etc/hosts of the bed's own, which
# `ip netns exec` mounts from /etc/netns/NAME/), as a cluster's DNS would; and
# NETBED_DIR/hI/ is its own directory (checkpoints, logs: no shared file
# system). The addresses exist only inside the namespaces; the bridge has
# none, so no packet of the bed reaches any other network. Teardown runs on
# exit (the sourcing script's EXIT trap is extended), and netbed_up first
# removes what a bed of a process that no longer exists left behind (a
# scenario killed by a timeout). Without root, iproute2 or unshare the
# scenario skips, naming what is missing.
#
# Names are short (interface names have at most 15 bytes): the bridge is
# nb<pid>, host I's namespace ddpnb<pid>h<I> and its veth nb<pid>h<I>
# (bed side) / eth0 (host side).

NETBED_PID=$$
NETBED_N=0
NETBED_DIR=${TMP:-${SCRATCH:-}}/netbed
NETBED_SUBNET=10.77.0

netbed_ns() { echo "ddpnb${NETBED_PID}h$1"; }
netbed_addr() { echo "$NETBED_SUBNET.$1"; }

# Removes the beds of processes that are gone (a scenario SIGKILLed by
# tests/run's timeout could not tear its own down).
netbed_sweep() {
    local ns pid br
    for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep -E '^ddpnb[0-9]+h[0-9]+$'); do
        pid=${ns#ddpnb}
        pid=${pid%h*}
        kill -0 "$pid" 2> /dev/null || { ip netns del "$ns" 2> /dev/null; rm -rf "/etc/netns/$ns"; }
    done
    for br in $(ip -o link show type bridge 2> /dev/null | awk -F': ' '{print $2}' | grep -E '^nb[0-9]+$'); do
        pid=${br#nb}
        kill -0 "$pid" 2> /dev/null || ip link del "$br" 2> /dev/null || true
    done
}

netbed_down() {
    local i
    for ((i = 1; i <= NETBED_N; i++)); do
        ip netns del "$(netbed_ns "$i")" 2> /dev/null || true
        rm -rf "/etc/netns/$(netbed_ns "$i")"
    done
    ip link del "nb$NETBED_PID" 2> /dev/null || true
    NETBED_N=0
}

# netbed_up N: makes hosts 1..N, or skips the scenario (exit 77).
netbed_up() {
    local n=$1 i j ns err
    [ "$(id -u)" = 0 ] || { echo "skipped: the network test bed needs root (network namespaces)"; exit 77; }
    command -v ip > /dev/null || { echo "skipped: the network test bed needs ip (iproute2)"; exit 77; }
    command -v unshare > /dev/null || { echo "skipped: the network test bed needs unshare (util-linux)"; exit 77; }
    netbed_sweep
    local prev
    prev=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
    # shellcheck disable=SC2064 # the previous trap's text, expanded now
    trap "${prev:+$prev; }netbed_down" EXIT
    if ! err=$(ip link add "nb$NETBED_PID" type bridge 2>&1); then
        echo "skipped: cannot make a bridge for the network test bed: $err"; exit 77
    fi
    ip link set "nb$NETBED_PID" up
    NETBED_N=$n
    for ((i = 1; i <= n; i++)); do
        ns=$(netbed_ns "$i")
        if ! err=$(ip netns add "$ns" 2>&1); then
            echo "skipped: cannot make a network namespace: $err"; exit 77
        fi
        ip link add "nb${NETBED_PID}h$i" type veth peer name eth0 netns "$ns"
        ip link set "nb${NETBED_PID}h$i" master "nb$NETBED_PID" up
        ip -n "$ns" addr add "$(netbed_addr "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        mkdir -p "$NETBED_DIR/h$i" "/etc/netns/$ns"
    done
    for ((i = 1; i <= n; i++)); do
        {
            printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n'
            for ((j = 1; j <= n; j++)); do printf '%s\th%d\n' "$(netbed_addr "$j")" "$j"; done
        } > "/etc/netns/$(netbed_ns "$i")/hosts"
    done
    # A command runs on a host (some containers allow namespaces but not
    # entering them, or not a UTS namespace of one's own).
    if ! err=$(netbed_run 1 true 2>&1); then
        echo "skipped: cannot run a command on a test host (ip netns exec, unshare --uts): $err"
        exit 77
    fi
    # Host 1 reaches every other host before the scenario starts.
    for ((i = 2; i <= n; i++)); do
        netbed_reach 1 "$i" || { echo "FAIL: test host 1 cannot reach test host $i on the bed" >&2; exit 1; }
    done
    :
}

# netbed_reach I J: whether host I can open a TCP connection to host J.
netbed_reach() {
    local j=$2 port=7077 rc
    ip netns exec "$(netbed_ns "$j")" /usr/bin/python3 -c "
import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('$(netbed_addr "$j")', $port)); s.listen(1); s.settimeout(5); s.accept()" 2> /dev/null &
    local listener=$!
    rc=1
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        if ip netns exec "$(netbed_ns "$1")" /usr/bin/python3 -c "
import socket; socket.create_connection(('$(netbed_addr "$j")', $port), 1)" 2> /dev/null; then
            rc=0; break
        fi
        sleep 0.1
    done
    kill "$listener" 2> /dev/null; wait "$listener" 2> /dev/null
    return $rc
}

# netbed_exec I COMMAND...: replaces the calling shell with COMMAND on host
# I (its network, host name hI, working directory NETBED_DIR/hI). For a
# command started in the background, `netbed_exec I cmd &`: the background
# shell becomes the command, so $! is the command's own PID, the one a
# scenario kills, waits for and cleans up. (A function whose body is a
# subshell would fork once more: $! would be a shell whose death leaves the
# command running.)
netbed_exec() {
    local i=$1
    shift
    cd "$NETBED_DIR/h$i" && exec ip netns exec "$(netbed_ns "$i")" \
        unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "h$i" "$@"
}

# netbed_run I COMMAND...: runs COMMAND on host I and waits for it.
netbed_run() (netbed_exec "$@")

# netbed_elastic NAME PORT ARGS...: the elastic ddp-train job most
# scenarios run, one agent on every host: --nnodes=2:N, two workers each,
# --max-restarts=3, c10d rendezvous at host 1:PORT, rdzv id NAME, ddp-train
# ARGS plus checkpoints in the host's own NAME/ directory. Each agent's
# output goes to $TMP/NAME.hI.out and .err, its pid to PIDS and PID_NAME_hI,
# and it carries the scenario's DDPRUN_TEST_TAG (agent.bash).
netbed_elastic() {
    local name=$1 port=$2 h
    shift 2
    for ((h = 1; h <= NETBED_N; h++)); do
        netbed_exec "$h" env DDPRUN_TEST_TAG="$TAG" ddprun --nnodes="2:$NETBED_N" \
            --nproc-per-node=2 --max-restarts=3 --rdzv-backend=c10d \
            --rdzv-endpoint="$(netbed_addr 1):$port" --rdzv-id="$name" --no-python \
            ddp-train "$@" --ckpt-dir "$NETBED_DIR/h$h/$name" \
            > "$TMP/$name.h$h.out" 2> "$TMP/$name.h$h.err" &
        PIDS+=($!)
        printf -v "PID_${name}_h$h" %s "$!"
    done
}

# netbed_redone NAME.hI MAX: the steps host I's rank 0 printed twice (a
# step done again after a restart: --log-every 1) are at most MAX, one per
# restart: each failure costs at most the step under way. Prints the count.
netbed_redone() {
    local out=$TMP/$1.out all uniq
    all=$(grep -c " step [0-9]*/" "$out")
    uniq=$(sed -n 's/.* step \([0-9]*\)\/.*/\1/p' "$out" | sort -u | grep -c .)
    echo "$1: $((all - uniq)) steps done again over $(grep -c '(round' "$TMP/$1.err") restarts (at most $2)"
    [ $((all - uniq)) -le "$2" ] || { dump "$1"; die "$1: $((all - uniq)) steps done again, more than $2"; }
}

# netbed_link I up|down: host I's link to the bridge (down: its packets
# vanish, as when a cable is pulled or a machine loses power).
netbed_link() { ip link set "nb${NETBED_PID}h$1" "$2"; }

# netbed_netem I ARGS...: tc netem ARGS on host I's interface (e.g. delay
# 50ms loss 1%); returns 1 when sch_netem is not available.
netbed_netem() {
    local i=$1
    shift
    ip netns exec "$(netbed_ns "$i")" tc qdisc replace dev eth0 root netem "$@" 2> /dev/null
}
