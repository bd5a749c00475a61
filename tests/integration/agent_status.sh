#!/usr/bin/env bash
# `ddprun status` and the agents' event log (c10d):
#  - a job stuck at the rendezvous (--nnodes=2, one agent): the status says
#    the round gathers and waits for nodes, 1 of at least 2 joined;
#  - the job running (two agents, two workers each): node ranks 0 and 1,
#    fresh heartbeats, the four workers' pids as the workers report them;
#  - after a worker failure (rank 3 exits 3, --max-restarts=1): restart
#    count 1, the failure with its root cause, the rank's last exit;
#  - --watch refreshes, --json is one JSON object; an unknown job, a store
#    nobody serves and a bad --watch get clear errors;
#  - a --standalone job: the command it prints shows it, and so does
#    `ddprun status` alone on its machine (of two jobs, it asks which);
#  - events.jsonl in the log dir: one JSON line per agent event, from
#    joining to shutdown.
# timeout: 90
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"

mkdir -p "$TMP/rec"
export DDPRUN_JOBS_DIR=$TMP/jobs # (this scenario's agents' notes for `ddprun status` alone)
port=$(free_port)
EP=127.0.0.1:$port
status() { ddprun status --rdzv-backend=c10d --rdzv-endpoint="$EP" --rdzv-id=st "$@"; }
js() { # FILE PYTHON-EXPRESSION (j: the status object): prints its value
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
agent() { # NAME: one agent of the job
    W_REC=$TMP/rec W_HOLD="[ ! -e $TMP/go ]" W_FAIL_RANK=3 W_FAIL_CODE=3 \
        start_ddprun "$1" --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint="$EP" \
        --rdzv-id=st --max-restarts=1 --log-dir "$TMP/logs-$1" --no-python "$WORKERS/status_worker.sh"
}
# rank 3 fails once (its first attempt), then every rank holds until go
mkdir -p "$TMP/w"
cat > "$TMP/w/status_worker.sh" << 'EOF'
#!/usr/bin/env bash
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || W_FAIL_RANK=none
export W_FAIL_RANK
exec "$W_WORKER" "$@"
EOF
chmod +x "$TMP/w/status_worker.sh"
WORKERS_REAL=$WORKERS
WORKERS=$TMP/w
export W_WORKER=$WORKERS_REAL/worker.sh

# --- stuck at the rendezvous -------------------------------------------------
agent a
wait_for 10 "a's store on port $port" store_up "$port"
sleep 0.5
status > "$TMP/s1.txt" || { cat "$TMP/s1.txt"; die "status of a gathering job failed"; }
cat "$TMP/s1.txt"
assert_grep "$TMP/s1.txt" "round 0, gathering" "the phase of a job stuck at the rendezvous"
assert_grep "$TMP/s1.txt" "waits for nodes: 1 of at least 2 joined" "what the stuck job waits for"
status --json > "$TMP/s1.json"
assert_eq "$(js "$TMP/s1.json" 'j["phase"], j["joined"], j["min_nodes"], len(j["nodes"])')" \
    "('gathering', 1, 2, 1)" "phase, joined, min nodes, nodes (JSON)"
assert_eq "$(js "$TMP/s1.json" 'j["nodes"][0]["status"]["state"], j["nodes"][0]["alive"]')" \
    "('rendezvous', True)" "the waiting agent's state"

# --- running, then a failure and a restart --------------------------------------
agent b
wait_line 20 "$TMP/a.err" "restart 1 of 1"
wait_line 20 "$TMP/b.err" "restart 1 of 1"
wait_for 10 "four workers of the restarted group" \
    eval '[ "$(records | grep -c " TORCHELASTIC_RESTART_COUNT=1 ")" -ge 4 ]'
ok4() {
    status --json > "$TMP/s2.json" && [ "$(js "$TMP/s2.json" 'sum(w["state"] == "running" for n in j["nodes"] for w in (n["status"] or {}).get("workers", []))')" = 4 ]
}
wait_for 10 "the status to show four running workers" ok4
status > "$TMP/s2.txt"
cat "$TMP/s2.txt"
assert_eq "$(js "$TMP/s2.json" 'j["phase"], j["round"] >= 1, j["restart_count"]')" "('running', True, 1)" \
    "phase, round, restart count after the failure"
assert_eq "$(js "$TMP/s2.json" 'sorted(n["node_rank"] for n in j["nodes"] if n["member"])')" "[0, 1]" \
    "the members' node ranks"
fresh() { # every node alive, its last beat (each third of the 5 s interval) recent
    status --json > "$TMP/s2b.json" &&
        [ "$(js "$TMP/s2b.json" 'all(n["alive"] and (n["heartbeat_age_s"] or 99) < 5 for n in j["nodes"])')" = True ]
}
wait_for 5 "fresh heartbeats in the status" fresh
want=$(records | grep ' TORCHELASTIC_RESTART_COUNT=1 ' | sed 's/^pid=\([0-9]*\).* RANK=\([0-9]*\) .*/\2:\1/' | sort | tr '\n' ' ')
got=$(js "$TMP/s2.json" '" ".join(sorted("%d:%d" % (w["rank"], w["pid"]) for n in j["nodes"] for w in n["status"]["workers"])) + " "')
assert_eq "$got" "$want" "ranks and pids of the workers (status against the workers' own)"
assert_eq "$(js "$TMP/s2.json" '[(f["rank"], f["exitcode"], f["root_cause"]) for f in j["failures"]] == [(3, 3, True)]')" \
    True "the failure: rank 3, exit code 3, the root cause"
assert_eq "$(js "$TMP/s2.json" '[w["last_exit"] for n in j["nodes"] for w in n["status"]["workers"] if w["rank"] == 3][0]')" \
    "exit code 3 (round 0)" "rank 3's last exit"
assert_grep "$TMP/s2.txt" "rank 3 \(local rank 1\) on .*root cause" "the failure, as text"
assert_grep "$TMP/s2.txt" "round [0-9]+, running; restarts 1 of 1; nodes 2:2" "the head line"
version=$(ddprun --version | head -n 1 | cut -d' ' -f2)
assert_grep "$TMP/s2.txt" "^ddprun $(printf '%s' "$version" | sed 's/[.+]/\\&/g') on every node$" \
    "the agents' version, as text"
assert_eq "$(js "$TMP/s2.json" 'sorted(set(n["status"]["version"] for n in j["nodes"]))')" \
    "['$version']" "the agents' version (JSON)"
# Shell workers keep no step record: the goodput is unknown, and said so,
# not 0% with every second in restarts.
assert_grep "$TMP/s2.txt" "^goodput of .*: unknown \(the workers keep no step record; ddp-train does\): of [0-9]+ s, workers ran [0-9.]+ s in [0-9]+ attempts?, rendezvous [0-9.]+ s$" \
    "a script's goodput, as text"
assert_eq "$(js "$TMP/s2.json" 'sorted(set((n["status"].get("goodput") or {}).get("known") for n in j["nodes"]))')" \
    "[False]" "a script's goodput known (JSON)"

# --watch refreshes; errors are clear
timeout 2.5 ddprun status --rdzv-backend=c10d --rdzv-endpoint="$EP" --rdzv-id=st --watch 1 > "$TMP/watch.txt"
frames=$(grep -c "^job 'st'" "$TMP/watch.txt")
[ "$frames" -ge 2 ] || die "--watch 1 drew $frames frames in 2.5 s"
ddprun status --rdzv-backend=c10d --rdzv-endpoint="$EP" --rdzv-id=nosuch > "$TMP/e1" 2>&1
assert_eq "$?" 1 "exit status for an unknown job"
assert_grep "$TMP/e1" "no job 'nosuch' at the store at $EP" "the unknown job's message"
dead=$(free_port)
ddprun status --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:"$dead" --rdzv-id=st > "$TMP/e2" 2>&1
assert_eq "$?" 1 "exit status for a store nobody serves"
assert_grep "$TMP/e2" "cannot reach the rendezvous store at 127.0.0.1:$dead" "the unreachable store's message"
status --watch=-1 > "$TMP/e3" 2>&1
assert_eq "$?" 2 "exit status for a bad --watch"
assert_grep "$TMP/e3" "--watch takes a number of seconds" "the bad --watch message"

# --- the end, and the event log ------------------------------------------------
touch "$TMP/go"
for n in a b; do
    pid=PID_$n
    wait_exit 20 "${!pid}"
    assert_rc "$n" 0
done
ev=$(echo "$TMP"/logs-a/st_*/events.jsonl)
[ -s "$ev" ] || die "no event log at $ev"
python3 - "$ev" << 'EOF' || die "the event log is not what it should be"
import json, sys
names = []
for i, line in enumerate(open(sys.argv[1]), 1):
    e = json.loads(line)  # every line is one JSON object
    assert set(e) == {"name", "source", "timestamp", "metadata"}, (i, e)
    assert e["metadata"]["run_id"] == "st", (i, e)
    names.append(e["name"])
need = ["ddprun.rendezvous.joining", "ddprun.rendezvous.round_formed",
        "ddprun.agent.workers_started", "ddprun.agent.restart", "ddprun.agent.shutdown"]
missing = [n for n in need if n not in names]
assert not missing, ("missing events", missing, names)
assert names[0] == "ddprun.rendezvous.joining" and names[-1] == "ddprun.agent.shutdown", names
assert names.count("ddprun.rendezvous.round_formed") == 2, names
print("event log:", len(names), "events:", ", ".join(sorted(set(names))))
EOF
assert_no_leftovers

# A --standalone job draws its store's port and its id: it says how to see it,
# and the command it prints works.
W_HOLD="[ ! -e $TMP/go-sa ]" start_ddprun sa --standalone --nproc-per-node=1 --no-python \
    "$WORKERS/status_worker.sh"
wait_line 10 "$TMP/sa.err" "to see this job, ddprun status"
cmd=$(sed -n 's/.*--standalone: to see this job, \(ddprun status .*\)$/\1/p' "$TMP/sa.err")
$cmd > "$TMP/sa-status.out" 2>&1 || { cat "$TMP/sa-status.out"; die "the printed '$cmd' failed"; }
grep -q "$(hostname)" "$TMP/sa-status.out" || { cat "$TMP/sa-status.out"; die "'$cmd' shows no node"; }
# With no endpoint, `ddprun status` finds the job that runs on this
# machine (the agents' notes, in DDPRUN_JOBS_DIR here); of two, it asks
# which, listing both, and --rdzv-id picks one.
id=$(sed -n 's/.*--rdzv-id \([^ ]*\)$/\1/p' <<< "$cmd")
ddprun status > "$TMP/sa-local.out" 2>&1 || { cat "$TMP/sa-local.out"; die "'ddprun status' alone failed"; }
grep -q "$(hostname)" "$TMP/sa-local.out" && grep -q "$id" "$TMP/sa-local.out" ||
    { cat "$TMP/sa-local.out"; die "'ddprun status' alone does not show job $id"; }
W_HOLD="[ ! -e $TMP/go-sa ]" start_ddprun sb --standalone --nproc-per-node=1 --no-python \
    "$WORKERS/status_worker.sh"
wait_line 10 "$TMP/sb.err" "to see this job, ddprun status"
rc=0
ddprun status > "$TMP/two.out" 2>&1 || rc=$?
assert_eq "$rc" 2 "'ddprun status' alone with two local jobs"
assert_grep "$TMP/two.out" "2 jobs run on this machine; say which with --rdzv-id" "the question"
assert_grep "$TMP/two.out" "--rdzv-id $id  \(ddprun pid $PID_sa\)" "job sa listed"
ddprun status --rdzv-id "$id" --json > "$TMP/pick.json" || die "'ddprun status --rdzv-id $id' failed"
assert_eq "$(js "$TMP/pick.json" 'j["run_id"]')" "$id" "the job --rdzv-id picked"
touch "$TMP/go-sa"
wait_exit 20 "$PID_sa"
wait_exit 20 "$PID_sb"
assert_rc sa 0
assert_eq "$(find "$DDPRUN_JOBS_DIR" -name '*.json' | wc -l)" 0 "notes left after the jobs ended"
rc=0
ddprun status > "$TMP/none.out" 2>&1 || rc=$?
assert_eq "$rc" 1 "'ddprun status' alone with no local job"
assert_grep "$TMP/none.out" "no ddprun runs on this machine" "the message with no local job"
echo "--standalone: '$cmd' shows the job, and so does 'ddprun status' alone on this machine"
