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
SLURMBED_DAEMONS=()

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
    local d=$1 f pid comm
    for f in /proc/[0-9]*/environ; do
        pid=${f#/proc/}
        pid=${pid%/environ}
        [ "$pid" != "$$" ] || continue
        comm=
        read -r comm < "/proc/$pid/comm" 2> /dev/null || true
        if [ "$comm" = slurmstepd ]; then
            ls -l "/proc/$pid/fd" 2> /dev/null | grep -qF -- "-> $d/log/" && echo "$pid"
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
        jobs=$(squeue -h -o %i 2> /dev/null)
        if [ -n "$jobs" ]; then
            # shellcheck disable=SC2086 # one argument per job
            scancel $jobs 2> /dev/null
            for ((i = 0; i < 40; i++)); do
                [ -z "$(squeue -h -o %i 2> /dev/null)" ] && break
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

slurmbed_write_conf() {
    local d=$SLURMBED_DIR ctld_port=$1 slurmd_port=$2
    cat > "$d/slurm.conf" << EOF
# The test bed's cluster (tests/lib/slurmbed.bash): one node, this machine.
ClusterName=ddprunbed
SlurmctldHost=$SLURMBED_NODE(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
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
NodeName=$SLURMBED_NODE NodeAddr=127.0.0.1 NodeHostname=$(hostname) CPUs=$(nproc) State=UNKNOWN
PartitionName=bed Nodes=$SLURMBED_NODE Default=YES MaxTime=INFINITE State=UP
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

# slurmbed_up: the bed, with its node idle; or the scenario skips.
slurmbed_up() {
    local c missing=()
    [ "$(id -u)" = 0 ] || slurmbed_skip "the Slurm test bed needs root (slurmd starts the jobs' tasks)"
    for c in munged munge unmunge slurmctld slurmd sbatch srun squeue sinfo scontrol scancel; do
        command -v "$c" > /dev/null || missing+=("$c")
    done
    [ ${#missing[@]} -eq 0 ] ||
        slurmbed_skip "no ${missing[*]} (apt install munge slurmctld slurmd slurm-client)"
    slurmbed_sweep
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
    slurmbed_write_conf "$(slurmbed_port)" "$(slurmbed_port)"
    # This bed only: not a system Slurm's configuration, nor the variables
    # of a Slurm job the tests might run in.
    local v
    for v in $(env | sed -n 's/^\(SLURM_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
    export SLURM_CONF=$SLURMBED_DIR/slurm.conf
    slurmbed_start_munge
    SLURMBED_TAG=$SLURMBED_DIR slurmctld -D -c -f "$SLURM_CONF" \
        > "$SLURMBED_DIR/log/slurmctld.out" 2>&1 &
    SLURMBED_DAEMONS+=($!)
    SLURMBED_TAG=$SLURMBED_DIR slurmd -D -f "$SLURM_CONF" -N "$SLURMBED_NODE" \
        > "$SLURMBED_DIR/log/slurmd.out" 2>&1 &
    SLURMBED_DAEMONS+=($!)
    local i state=
    for ((i = 0; i < 200; i++)); do
        state=$(sinfo -h -n "$SLURMBED_NODE" -o %T 2> /dev/null || true)
        [ "$state" = idle ] && return 0
        for c in "${SLURMBED_DAEMONS[@]}"; do kill -0 "$c" 2> /dev/null || break 2; done
        sleep 0.1
    done
    slurmbed_logs
    slurmbed_skip "the Slurm daemons did not bring node $SLURMBED_NODE up (state '${state:-none}'; logs above)"
}

# slurmbed_wait_job SECONDS JOB: waits until the job has left the queue
# (finished, failed or cancelled) and sets JOB_STATE (COMPLETED, FAILED...)
# and JOB_EXIT (its exit code:signal). Fails the scenario after SECONDS.
slurmbed_wait_job() {
    local secs=$1 job=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        JOB_STATE=$(scontrol -o show job "$job" 2> /dev/null |
            sed -n 's/.* JobState=\([A-Z_]*\) .*/\1/p') || true
        case $JOB_STATE in
            PENDING | RUNNING | CONFIGURING | COMPLETING | REQUEUED | "") sleep 0.1 ;;
            *)
                JOB_EXIT=$(scontrol -o show job "$job" | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p') || true
                return 0
                ;;
        esac
    done
    echo "FAIL: job $job still ${JOB_STATE:-unknown} after $secs s"
    scontrol show job "$job"
    slurmbed_logs
    exit 1
}

# slurmbed_wait_running SECONDS JOB: until the job runs.
slurmbed_wait_running() {
    local secs=$1 job=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        [ "$(squeue -h -j "$job" -o %T 2> /dev/null || true)" = RUNNING ] && return 0
        sleep 0.1
    done
    echo "FAIL: job $job did not start within $secs s"
    scontrol show job "$job"
    exit 1
}
