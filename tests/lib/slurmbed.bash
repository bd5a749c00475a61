# The Slurm test bed: a real Slurm cluster of one node on this machine,
# from Debian's packages (munge, slurmctld, slurmd, slurm-client), made
# and removed by the scenario that sources this file:
#
#   source tests/lib/train.bash        (or agent.bash: SCRATCH or TMP)
#   source tests/lib/slurmbed.bash
#   slurmbed_up                        munged, slurmctld, slurmd; the node idle
#   job=$(sbatch --parsable -o out job.sh)
#   slurmbed_wait_job 60 "$job"        until it leaves the queue; JOB_STATE
#
# or a cluster of N nodes, each a test host of the network bed
# (tests/lib/netbed.bash, sourced first), named h1..hN at their own
# addresses; slurmctld runs on h1, and so must the Slurm commands, through
# slurmbed_cmd (the bed's addresses exist only inside its namespaces):
#
#   TMP=$SCRATCH; source tests/lib/netbed.bash; source tests/lib/slurmbed.bash
#   slurmbed_up 2                      netbed_up 2, then the daemons
#   job=$(slurmbed_cmd sbatch --parsable -N 2 ...)
#
# Everything lives in a directory of its own, /tmp/slurmbed.<pid>: munge's
# key and socket, slurm.conf (SLURM_CONF, exported, so every Slurm command
# of the scenario talks to this bed and never to a system Slurm), state,
# spool and logs. The daemons listen on free ports on loopback only (the
# node's address is 127.0.0.1, and CommunicationParameters keeps them off
# the wildcard address); no cgroup plugin is needed (proctrack/linuxproc,
# task/none). Teardown runs on exit (the sourcing script's EXIT trap is
# extended): the bed's jobs are cancelled and waited for, then the daemons
# this file started are stopped by their PIDs; slurmbed_up first removes
# what a bed of a process that no longer exists left behind (a scenario
# killed by its timeout). Without root, the packages or daemons that start,
# the scenario skips with the reason as its last line.

SLURMBED_PID=$$
SLURMBED_DIR=/tmp/slurmbed.$SLURMBED_PID
SLURMBED_NODE=
SLURMBED_HOSTS=0
SLURMBED_DAEMONS=()

# slurmbed_cmd COMMAND...: a Slurm command, run where the controller is
# reachable (host 1 of a bed of several hosts).
slurmbed_cmd() {
    if [ "$SLURMBED_HOSTS" -gt 0 ]; then netbed_run 1 "$@"; else "$@"; fi
}

# slurmbed_exec_on I COMMAND...: replaces the calling (background) shell
# with COMMAND on test host I, or on this machine for I = 0, so that $! is
# the daemon's own PID: `slurmbed_exec_on 2 slurmd ... &`. A test host's
# command gets its network, host name and /etc/hosts as netbed_run gives
# them, but keeps this machine's /sys, whose cgroup file systems slurmd
# reads at start (ip netns exec mounts a /sys of the namespace's own,
# without them).
slurmbed_exec_on() {
    local i=$1 ns
    shift
    [ "$i" -ne 0 ] || exec "$@"
    ns=$(netbed_ns "$i")
    # shellcheck disable=SC2016 # the inner shell expands them
    cd "$NETBED_DIR/h$i" && exec nsenter --net="/run/netns/$ns" unshare --mount --uts /bin/sh -c \
        'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"' \
        "/etc/netns/$ns/hosts" "h$i" "$@"
}

slurmbed_skip() {
    echo "skipped: $*"
    exit 77
}

# The processes of the bed in directory $1: its daemons (tagged
# SLURMBED_TAG=$1 in their environment), the step daemons slurmd started
# (slurmstepd clears its environment, but writes to the bed's log), and its
# jobs' tasks (SLURM_CONF into the bed and a job id). The scenario's own
# shell has SLURM_CONF but no job id, so it never finds itself.
slurmbed_pids() {
    local d=$1 f pid comm fd
    for f in /proc/[0-9]*/environ; do
        pid=${f#/proc/}
        pid=${pid%/environ}
        [ "$pid" != "$$" ] || continue
        comm=
        read -r comm 2> /dev/null < "/proc/$pid/comm" || true
        if [ "$comm" = slurmstepd ]; then
            for fd in /proc/"$pid"/fd/*; do
                [[ $(readlink "$fd" 2> /dev/null) == "$d/log/"* ]] && { echo "$pid"; break; }
            done
            continue
        fi
        grep -qzx -e "SLURMBED_TAG=$d" -e "SLURM_CONF=$d/slurm.conf" "$f" 2> /dev/null || continue
        if grep -qzx "SLURMBED_TAG=$d" "$f" 2> /dev/null || grep -qz "^SLURM_JOB_ID=" "$f"; then
            echo "$pid"
        fi
    done
}

slurmbed_kill_all() {
    local p
    for p in $(slurmbed_pids "$1"); do kill -KILL "$p" 2> /dev/null || true; done
}

# Beds whose scenario is gone (SIGKILLed by tests/run's timeout).
slurmbed_sweep() {
    local d pid
    for d in /tmp/slurmbed.[0-9]*; do
        [ -d "$d" ] || continue
        pid=${d##*.}
        kill -0 "$pid" 2> /dev/null && continue
        slurmbed_kill_all "$d"
        rm -rf "$d"
    done
}

slurmbed_down() {
    local p i jobs
    set +e # (in the EXIT trap: a daemon already gone is no reason to stop)
    [ -d "$SLURMBED_DIR" ] || return 0
    # The jobs first, while slurmctld and slurmd are there to end them.
    if [ ${#SLURMBED_DAEMONS[@]} -gt 0 ]; then
        jobs=$(slurmbed_cmd squeue -h -o %i 2> /dev/null)
        if [ -n "$jobs" ]; then
            # shellcheck disable=SC2086 # one argument per job
            slurmbed_cmd scancel $jobs 2> /dev/null
            for ((i = 0; i < 40; i++)); do
                [ -z "$(slurmbed_cmd squeue -h -o %i 2> /dev/null)" ] && break
                sleep 0.1
            done
        fi
    fi
    for p in "${SLURMBED_DAEMONS[@]}"; do kill -TERM "$p" 2> /dev/null; done
    for ((i = 0; i < 30; i++)); do
        local alive=0
        for p in "${SLURMBED_DAEMONS[@]}"; do kill -0 "$p" 2> /dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    for p in "${SLURMBED_DAEMONS[@]}"; do kill -KILL "$p" 2> /dev/null; done
    for p in "${SLURMBED_DAEMONS[@]}"; do wait "$p" 2> /dev/null; done
    SLURMBED_DAEMONS=()
    slurmbed_kill_all "$SLURMBED_DIR"
    rm -rf "$SLURMBED_DIR"
}

slurmbed_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The last lines of the bed's logs, for a skip or a failure.
slurmbed_logs() {
    local f
    for f in "$SLURMBED_DIR"/log/*; do
        [ -s "$f" ] || continue
        echo "--- $(basename "$f")"
        tail -n 15 "$f"
    done
}

# The node lines: this machine on loopback, or the test hosts h1..hN.
slurmbed_nodes_conf() {
    local i
    if [ "$SLURMBED_HOSTS" -eq 0 ]; then
        echo "NodeName=$SLURMBED_NODE NodeAddr=127.0.0.1 NodeHostname=$(hostname) CPUs=$(nproc) State=UNKNOWN"
        echo "PartitionName=bed Nodes=$SLURMBED_NODE Default=YES MaxTime=INFINITE State=UP"
        return
    fi
    for ((i = 1; i <= SLURMBED_HOSTS; i++)); do
        echo "NodeName=h$i NodeAddr=$(netbed_addr "$i") CPUs=$(nproc) State=UNKNOWN"
    done
    echo "PartitionName=bed Nodes=h[1-$SLURMBED_HOSTS] Default=YES MaxTime=INFINITE State=UP"
}

slurmbed_write_conf() {
    local d=$SLURMBED_DIR ctld_port=$1 slurmd_port=$2 ctld_addr=127.0.0.1
    [ "$SLURMBED_HOSTS" -eq 0 ] || ctld_addr=$(netbed_addr 1)
    cat > "$d/slurm.conf" << EOF
# The test bed's cluster (tests/lib/slurmbed.bash).
ClusterName=ddprunbed
SlurmctldHost=$SLURMBED_NODE($ctld_addr)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.%n.log
PlugStackConfig=$d/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobRequeue=1
ReturnToService=2
KillWait=2
MinJobAge=600
InactiveLimit=0
SlurmdTimeout=60
$(slurmbed_nodes_conf)
EOF
    : > "$d/plugstack.conf"
}

slurmbed_start_munge() {
    local d=$SLURMBED_DIR
    if command -v mungekey > /dev/null; then
        mungekey -c -k "$d/munge/munge.key" > /dev/null 2>&1
    else
        dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
    fi
    chmod 600 "$d/munge/munge.key"
    SLURMBED_TAG=$d munged -F --force --socket="$d/munge/munge.socket" \
        --key-file="$d/munge/munge.key" --pid-file="$d/munge/munged.pid" \
        --seed-file="$d/munge/munged.seed" --log-file="$d/log/munged.log" \
        > "$d/log/munged.out" 2>&1 &
    SLURMBED_DAEMONS+=($!)
    local i
    for ((i = 0; i < 50; i++)); do
        munge -S "$d/munge/munge.socket" -n 2> /dev/null |
            unmunge -S "$d/munge/munge.socket" > /dev/null 2>&1 && return 0
        sleep 0.1
    done
    slurmbed_logs
    slurmbed_skip "munged did not start (see its log above)"
}

# slurmbed_up [N]: the bed, with its nodes idle (one, this machine; or N
# test hosts); or the scenario skips.
slurmbed_up() {
    local c missing=()
    SLURMBED_HOSTS=${1:-0}
    [ "$SLURMBED_HOSTS" -ne 1 ] || SLURMBED_HOSTS=0
    [ "$(id -u)" = 0 ] || slurmbed_skip "the Slurm test bed needs root (slurmd starts the jobs' tasks)"
    for c in munged munge unmunge slurmctld slurmd sbatch srun squeue sinfo scontrol scancel; do
        command -v "$c" > /dev/null || missing+=("$c")
    done
    [ ${#missing[@]} -eq 0 ] ||
        slurmbed_skip "no ${missing[*]} (apt install munge slurmctld slurmd slurm-client)"
    # srun and slurmd bind to the address this machine's name resolves to.
    getent hosts "$(hostname)" > /dev/null ||
        slurmbed_skip "this machine's host name ($(hostname)) does not resolve; Slurm needs it to"
    slurmbed_sweep
    # (netbed_up first, so that its teardown, in the EXIT trap, runs after ours)
    [ "$SLURMBED_HOSTS" -eq 0 ] || netbed_up "$SLURMBED_HOSTS"
    local prev
    prev=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
    # shellcheck disable=SC2064 # the previous trap's text, expanded now
    trap "slurmbed_down${prev:+; $prev}" EXIT
    # A scenario stopped by tests/run's timeout still tears the bed down.
    [ -n "$(trap -p TERM)" ] || trap 'exit 143' TERM
    [ -n "$(trap -p INT)" ] || trap 'exit 130' INT
    rm -rf "$SLURMBED_DIR"
    mkdir -p "$SLURMBED_DIR"/{munge,state,spool,log}
    chmod 755 "$SLURMBED_DIR"
    chmod 700 "$SLURMBED_DIR/munge"
    SLURMBED_NODE=$(hostname -s)
    [ "$SLURMBED_HOSTS" -eq 0 ] || SLURMBED_NODE=h1
    slurmbed_write_conf "$(slurmbed_port)" "$(slurmbed_port)"
    # This bed only: not a system Slurm's configuration, nor the variables
    # of a Slurm job the tests might run in.
    local v
    for v in $(env | sed -n 's/^\(SLURM_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
    export SLURM_CONF=$SLURMBED_DIR/slurm.conf
    slurmbed_start_munge
    SLURMBED_TAG=$SLURMBED_DIR slurmbed_exec_on $((SLURMBED_HOSTS > 0)) slurmctld -D -c -f "$SLURM_CONF" \
        > "$SLURMBED_DIR/log/slurmctld.out" 2>&1 &
    SLURMBED_DAEMONS+=($!)
    local i state=
    if [ "$SLURMBED_HOSTS" -eq 0 ]; then
        mkdir -p "$SLURMBED_DIR/spool/$SLURMBED_NODE"
        SLURMBED_TAG=$SLURMBED_DIR slurmd -D -f "$SLURM_CONF" -N "$SLURMBED_NODE" \
            > "$SLURMBED_DIR/log/slurmd.out" 2>&1 &
        SLURMBED_DAEMONS+=($!)
    fi
    for ((i = 1; i <= SLURMBED_HOSTS; i++)); do
        mkdir -p "$SLURMBED_DIR/spool/h$i"
        SLURMBED_TAG=$SLURMBED_DIR slurmbed_exec_on "$i" slurmd -D -f "$SLURM_CONF" -N "h$i" \
            > "$SLURMBED_DIR/log/slurmd.h$i.out" 2>&1 &
        SLURMBED_DAEMONS+=($!)
    done
    for ((i = 0; i < 200; i++)); do
        state=$(slurmbed_cmd sinfo -h -N -o %T 2> /dev/null | sort -u | tr '\n' ' ' || true)
        [ "$state" = "idle " ] && return 0
        for c in "${SLURMBED_DAEMONS[@]}"; do kill -0 "$c" 2> /dev/null || break 2; done
        sleep 0.1
    done
    slurmbed_logs
    slurmbed_skip "the Slurm daemons did not bring the nodes up (states '${state:-none}'; logs above)"
}

# slurmbed_wait_job SECONDS JOB: waits until the job has left the queue
# (finished, failed or cancelled) and sets JOB_STATE (COMPLETED, FAILED...)
# and JOB_EXIT (its exit code:signal). Fails the scenario after SECONDS.
slurmbed_wait_job() {
    local secs=$1 job=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        JOB_STATE=$(slurmbed_cmd scontrol -o show job "$job" 2> /dev/null |
            sed -n 's/.* JobState=\([A-Z_]*\) .*/\1/p') || true
        case $JOB_STATE in
            PENDING | RUNNING | CONFIGURING | COMPLETING | REQUEUED | "") sleep 0.1 ;;
            *)
                # shellcheck disable=SC2034 # for the scenario
                JOB_EXIT=$(slurmbed_cmd scontrol -o show job "$job" | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p') || true
                return 0
                ;;
        esac
    done
    echo "FAIL: job $job still ${JOB_STATE:-unknown} after $secs s"
    slurmbed_cmd scontrol show job "$job"
    slurmbed_logs
    exit 1
}

# slurmbed_wait_running SECONDS JOB: until the job runs.
slurmbed_wait_running() {
    local secs=$1 job=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        [ "$(slurmbed_cmd squeue -h -j "$job" -o %T 2> /dev/null || true)" = RUNNING ] && return 0
        sleep 0.1
    done
    echo "FAIL: job $job did not start within $secs s"
    slurmbed_cmd scontrol show job "$job"
    exit 1
}
