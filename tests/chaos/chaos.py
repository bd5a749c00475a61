#!/usr/bin/env python3
"""make chaos: a seeded, randomized fault campaign against ddprun + ddp-train,
judged by a run never interrupted.

Each schedule runs one job: two nodes (two ddprun agents on this machine,
c10d rendezvous on loopback, one worker each, each node its own --ckpt-dir
and memory root), ResNet-20 on small synthetic images for two epochs with
an evaluation after each, checkpoints every few steps and a snapshot in
memory every step. A schedule draws one to three faults, each a class and a
moment:

  classes  kill-worker   SIGKILL of one node's worker
           kill-node     SIGKILL of node 1's agent and worker, the node
                         started again (a replaced machine; node 0 hosts
                         the c10d store, whose loss no c10d job survives)
           hang-worker   SIGSTOP of one node's worker (the file timer's
                         --step-timeout must find it)
           preempt       SIGTERM to both agents (a scheduler's preemption),
                         then the job started again (its requeue)
           preempt-usr1  the same with SIGUSR1, Slurm's warning before it
                         preempts (--signal; ddprun given
                         --signals-to-handle ...,SIGUSR1)
           foreign-ckpt  another job's checkpoint (--seed 1, at a step past
                         this job's last) in one node's --ckpt-dir from the
                         start
           disk-full     one node's --ckpt-dir a 1 MiB tmpfs, too small for
                         one checkpoint, from the start (root only)
           read-only     one node's --ckpt-dir mounted read-only, from the
                         start (root only: root writes through a mode)
           slow-disk     one node's checkpoint writes fsync'd slowly
                         (bench/slow_fsync.c), from the start
           join          a third node's agent starts (a scale-up): the
                         group restarts on 3 nodes, sharing the global
                         batch 11 + 11 + 10
           leave         node 1's or node 2's agent is told to stop
                         (SIGTERM: a drained node) and not replaced: the
                         others go on without it
           (a schedule with a join or a leave runs --nnodes 1:3)
  moments  step=K        once global step K is done
           coll=K        after step K, once the struck node's worker is
                         inside a collective (its collective record,
                         DDPRUN_COLL_RECORD, shows one entered and not
                         finished): a gradient all-reduce, mostly
           eval          as an epoch's last step is done: its evaluation
           save          as an epoch's evaluation is done: its checkpoint
           final         as the last step is done: the last evaluation and
                         the final checkpoint
           recovery      as the group restarts after another fault: during
                         the rendezvous, the workers' start, the resume's
                         broadcast (never, without another fault)

The oracle, for every schedule: every agent of the last job exits 0 (or,
where no node has a usable --ckpt-dir, non-zero, saying so); the final
checkpoint is on some node's disk with the weights, momentum and buffers of
the uninterrupted run, bit for bit (its digest); no process of the job and
nothing in its memory roots is left; each agent redid at most one step per
fault; the logs name each fault struck alone (the worker's SIGKILL, the
watchdog's kill, the node that left, the signal). A failing schedule is shrunk to the fewest of its faults that still
fail, and printed with the command that replays it.

Every rank logs the samples of each step it trains (ddp-train
--sample-log); the oracle takes each step's newest attempt and checks that
every step is there and every sample of every epoch was trained exactly
once, whatever the node counts. Where every kept step ran on 2 nodes the
final weights must be the uninterrupted run's bit for bit; where the job
was resized (other sums, per-rank batch norm) the final test loss must be
within LOSS_TOL of the uninterrupted run's. A joiner that comes after the
job's end is told the rendezvous is closed and exits 1, as torchrun's
does: not judged.

With --workload torch, the job is a PyTorch DDP script instead
(examples/snapshot_resume.py: gloo, TORCH_PY's torch, its state in
DDPRUN_SNAPSHOT_DIR after every step, no disk checkpoints): the classes
kill-worker and kill-node, at a random step (the script's --log-every 1
lines); the oracle: every agent exits 0, the final weights the script
prints are the uninterrupted run's, nothing left behind.

With --net (root), each node runs on a host of a network test bed (network
namespaces joined by a bridge, as tests/lib/netbed.bash makes), the store
on node 0's, and two more classes are drawn:

           link-flap     one node's link down for 0.8 s, then up (inside
                         the 2 s heartbeat: TCP retransmits)
           host-lost     node 1's link down for good and its processes
                         killed (a machine that dies without a word); a
                         spare host with an empty disk and memory
                         replaces it

With --store etcd the rendezvous meets on a cluster of three etcd members
(on the bed, one on each of the first three hosts: a lost host takes its
member with it) instead of node 0's c10d store, and one more class is
drawn:

           store-lost    etcd member m<N+1> killed (its machine lost): the
                         other two keep the quorum

usage: chaos.py [--seed S] [--runs N] [--replay SPEC] [--workload ddp-train|torch] [--net]
                [--store c10d|etcd]
  SPEC: faults separated by ',', each CLASS[@NODE][:MOMENT], e.g.
        'kill-worker@1:step=13,preempt:eval'
Prints one line per schedule and, at the end, per fault class and moment,
how many were drawn and how many broke the oracle. Exit 1 if any did."""
import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "build", "bin")
COLL_PEEK = os.path.join(ROOT, "build", "tests", "coll-peek")
STEPS_PER_EPOCH = 32
EPOCHS = 2
TOTAL = STEPS_PER_EPOCH * EPOCHS
TRAIN = ["--model", "resnet20", "--data", "synthetic", "--input-shape", "3x8x8",
         "--synthetic-size", str(STEPS_PER_EPOCH * 32), "--batch-size", "16",
         "--epochs", str(EPOCHS), "--threads", "1", "--log-every", "1", "--seed", "7",
         "--ckpt-every", "8", "--snapshot-every", "1", "--step-timeout", "4"]
CLASSES = ["kill-worker", "kill-node", "hang-worker", "preempt", "preempt-usr1", "disk-full",
           "slow-disk", "foreign-ckpt", "join", "leave", "read-only"]
ROOT_ONLY = {"disk-full", "read-only"}  # (a mount)
UNUSABLE = {"disk-full", "foreign-ckpt", "read-only"}  # the node's --ckpt-dir keeps nothing
RESIZE = {"join", "leave"}  # the job's node count changes: --nnodes 1:3
NET_CLASSES = ["link-flap", "host-lost"]  # --net only: the nodes on the test bed's hosts
BED = None  # --net: the network test bed (Bed)
SPARE_HOST = 4  # the bed's host that replaces a lost one
ETCD = None  # --store etcd: the rendezvous on a 3-member etcd cluster (Etcd)
ETCD_CLASSES = ["store-lost"]  # --store etcd only
JOINER = 2  # the node a join starts
MOMENTS = ["step", "coll", "eval", "save", "final", "recovery"]
WHOLE_RUN = {"disk-full", "slow-disk", "foreign-ckpt", "read-only"}  # from the start, no moment
PREEMPT = {"preempt": signal.SIGTERM, "preempt-usr1": signal.SIGUSR1}
FOREIGN = None  # another job's checkpoint, made once (foreign_checkpoint)
JOB_TIMEOUT = int(os.environ.get("CHAOS_JOB_TIMEOUT", "120"))
WORKLOAD = "ddp-train"
KEEP = False  # --keep: every schedule's logs kept
TORCH_PY = os.environ.get("TORCH_PY", "/usr/bin/python3")
TORCH_STEPS = 100
TORCH_CLASSES = ["kill-worker", "kill-node"]
TORCH_TIME = 5.0  # the uninterrupted torch run's seconds (measured: reference_digest)
REF_LOSS = None  # the uninterrupted run's last test loss (reference_digest)
# A resized run's, relative to it: 1.7% at most (median 0.19%) in the 176
# resized schedules of the campaign of 1000 (docs/results.md). The labels of --data synthetic are
# random, so every run's loss stays near ln 10: this catches a run gone
# wrong (a NaN, a blow-up), not one that learned less; the samples counted
# (samples_kept) are the resize's exact check.
LOSS_TOL = 0.05


class Bed:
    """The network test bed of tests/lib/netbed.bash, for the campaign:
    hosts 1..n, each a network namespace with its own address (10.78.0.i),
    joined by veth pairs to a bridge that has no address, so that a link
    can go down silently (no FIN, no RST: a pulled cable, a dead machine).
    Node 0 runs on host 1, node 1 on host 2, the joiner on host 3, a lost
    host's replacement on host 4."""

    SUBNET = "10.78.0"

    def __init__(self, n):
        self.pid, self.n = os.getpid(), 0
        self.sweep()
        try:
            self.make(n)
        except OSError:
            self.down()
            raise

    def make(self, n):
        self.ip("link", "add", self.bridge(), "type", "bridge")
        self.ip("link", "set", self.bridge(), "up")
        for i in range(1, n + 1):
            ns = self.ns(i)
            self.ip("netns", "add", ns)
            self.n = i
            self.ip("link", "add", self.veth(i), "type", "veth", "peer", "name", "eth0", "netns", ns)
            self.ip("link", "set", self.veth(i), "master", self.bridge(), "up")
            self.ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            self.ip("-n", ns, "link", "set", "eth0", "up")
            self.ip("-n", ns, "link", "set", "lo", "up")
        # every host resolves every other's name, as a cluster's DNS would (ip netns
        # exec mounts /etc/netns/NS/hosts over /etc/hosts): a job on etcd finds its
        # workers' store at node 0's host name
        names = "".join(f"{self.addr(j)}\th{j}\n" for j in range(1, n + 1))
        for i in range(1, n + 1):
            os.makedirs(f"/etc/netns/{self.ns(i)}", exist_ok=True)
            with open(f"/etc/netns/{self.ns(i)}/hosts", "w") as f:
                f.write("127.0.0.1\tlocalhost\n::1\tlocalhost\n" + names)

    def bridge(self):
        return f"nbc{self.pid}"

    def ns(self, i):
        return f"ddpnc{self.pid}h{i}"

    def veth(self, i):
        return f"nbc{self.pid}h{i}"

    def addr(self, i):
        return f"{self.SUBNET}.{i}"

    @staticmethod
    def ip(*args):
        out = subprocess.run(["ip", *args], capture_output=True, text=True)
        if out.returncode:
            raise OSError(f"ip {' '.join(args)}: {out.stderr.strip()}")

    def wrap(self, i, cmd):
        """cmd run on host i (its network, host name hI)."""
        return ["ip", "netns", "exec", self.ns(i), "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', f"h{i}"] + cmd

    def link(self, i, state):
        self.ip("link", "set", self.veth(i), state)

    def down(self):
        for i in range(1, self.n + 1):
            subprocess.run(["ip", "netns", "del", self.ns(i)], capture_output=True)
            shutil.rmtree(f"/etc/netns/{self.ns(i)}", ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge()], capture_output=True)

    @staticmethod
    def sweep():
        """The beds of campaigns that are gone (killed before their teardown)."""
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for name in re.findall(r"^ddpnc(\d+)h\d+", out, re.M):
            if not os.path.exists(f"/proc/{name}"):
                for ns in re.findall(rf"^(ddpnc{name}h\d+)", out, re.M):
                    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
                    shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
                subprocess.run(["ip", "link", "del", f"nbc{name}"], capture_output=True)


class Etcd:
    """--store etcd: a cluster of three etcd members (Debian's etcd-server)
    for the whole campaign, each schedule's keys under its own run id. On
    the bed member mI runs on host I (node 0's, node 1's, the joiner's: a
    cluster spread over the job's machines, so a lost host takes its member
    with it), else on loopback ports. A member a fault killed is started
    again (its data kept: it rejoins) before the next schedule."""

    def __init__(self, base):
        self.dir = os.path.join(base, "etcd")
        self.ports = {i: (2379, 2380) if BED else (free_port(), free_port()) for i in (1, 2, 3)}
        self.procs = {}
        for i in (1, 2, 3):
            self.start(i)
        self.ensure()

    def addr(self, i):
        return BED.addr(i) if BED else "127.0.0.1"

    def endpoints(self):
        return ",".join(f"{self.addr(i)}:{self.ports[i][0]}" for i in (1, 2, 3))

    def start(self, i):
        c, p = self.ports[i]
        initial = ",".join(f"m{j}=http://{self.addr(j)}:{self.ports[j][1]}" for j in (1, 2, 3))
        cmd = ["etcd", "--name", f"m{i}", "--data-dir", os.path.join(self.dir, f"m{i}"),
               "--listen-client-urls", f"http://{self.addr(i)}:{c}",
               "--advertise-client-urls", f"http://{self.addr(i)}:{c}",
               "--listen-peer-urls", f"http://{self.addr(i)}:{p}",
               "--initial-advertise-peer-urls", f"http://{self.addr(i)}:{p}",
               "--initial-cluster", initial, "--initial-cluster-state", "new",
               "--initial-cluster-token", f"ddprun-chaos-{os.getpid()}"]
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, f"m{i}.log"), "a") as out:
            self.procs[i] = subprocess.Popen(BED.wrap(i, cmd) if BED else cmd, stdout=out,
                                             stderr=subprocess.STDOUT, start_new_session=True)

    def healthy(self, i):
        cmd = ["env", "ETCDCTL_API=3", "etcdctl", "--dial-timeout", "1s", "--command-timeout",
               "2s", "--endpoints", f"{self.addr(i)}:{self.ports[i][0]}", "endpoint", "health"]
        return subprocess.run(BED.wrap(i, cmd) if BED else cmd, capture_output=True).returncode == 0

    def kill(self, i):
        p = self.procs.get(i)
        if not p or p.poll() is not None:
            return False
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return True

    def ensure(self):
        """Every member serving, a leader elected (20 s at most)."""
        for i in (1, 2, 3):
            if self.procs[i].poll() is not None:
                self.start(i)
        deadline = time.time() + 20
        for i in (1, 2, 3):
            while not self.healthy(i):
                if time.time() > deadline:
                    raise OSError(f"etcd member m{i} does not serve (log: {self.dir}/m{i}.log)")
                time.sleep(0.2)

    def stop(self):
        for i in (1, 2, 3):
            self.kill(i)


BED_PORTS = iter(range(20000, 30000))  # below the kernel's ephemeral ports (32768-60999)


def store_port():
    """The c10d store's port for a job. On the bed a port free here says
    nothing of node 0's host, where one of the job's own connections may
    hold it as its ephemeral port: a port from below that range instead."""
    return next(BED_PORTS) if BED else free_port()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Fault:
    def __init__(self, cls, node=0, moment="start", step=0):
        self.cls, self.node, self.moment, self.step = cls, node, moment, step

    def __str__(self):
        where = f"@{self.node}" if self.cls not in PREEMPT else ""
        when = "" if self.cls in WHOLE_RUN else (
            f":step={self.step}" if self.moment == "step" else
            f":coll={self.step}" if self.moment == "coll" else
            f":ms={self.step}" if self.moment == "time" else f":{self.moment}")
        return f"{self.cls}{where}{when}"

    @staticmethod
    def parse(text):
        m = re.fullmatch(r"([a-z0-9-]+)(?:@([012]))?(?::((step|ms|coll)=(\d+)|eval|save|final|recovery))?",
                         text.strip())
        if not m or m.group(1) not in CLASSES + NET_CLASSES + ETCD_CLASSES:
            raise SystemExit(f"chaos: cannot read fault '{text}' (CLASS[@NODE][:MOMENT])")
        default = {"kill-node": 1, "leave": 1, "join": JOINER, "host-lost": 1}.get(m.group(1), 0)
        cls, node = m.group(1), int(m.group(2) or default)
        if cls in NET_CLASSES and not BED:
            raise SystemExit(f"chaos: '{text}' needs the network test bed: --net")
        if cls in ETCD_CLASSES and not ETCD:
            raise SystemExit(f"chaos: '{text}' needs the etcd rendezvous: --store etcd")
        if cls == "host-lost" and node != 1:
            raise SystemExit(f"chaos: '{text}': only node 1's host can be lost (node 0's hosts "
                             f"the c10d store, whose loss no c10d job survives)")
        if node == JOINER and cls not in ("join", "leave", "kill-worker", "hang-worker"):
            raise SystemExit(f"chaos: '{text}': node {JOINER} is the joiner: only join, leave "
                             f"and a worker's faults strike it")
        if cls in WHOLE_RUN:
            return Fault(cls, node)
        if m.group(4):
            return Fault(cls, node, {"ms": "time"}.get(m.group(4), m.group(4)), int(m.group(5)))
        return Fault(cls, node, m.group(3) or "step", 0 if m.group(3) else 1)


def usable_classes(root_ok):
    return ([c for c in CLASSES if root_ok or c not in ROOT_ONLY] + (NET_CLASSES if BED else []) +
            (ETCD_CLASSES if ETCD else []))


def draw_one(rng, cls):
    node = (1 if cls in ("kill-node", "host-lost") else JOINER if cls == "join" else
            rng.randrange(3) if cls == "store-lost" else
            rng.choice([1, JOINER]) if cls == "leave" else rng.randrange(2))
    if cls in WHOLE_RUN:
        return Fault(cls, node)
    moment = rng.choice(MOMENTS)
    return Fault(cls, node, moment, rng.randrange(1, TOTAL) if moment in ("step", "coll") else 0)


def draw_torch(rng):
    """The PyTorch workload's faults: a worker or node 1 killed after a
    random time within the uninterrupted run's (milliseconds in step)."""
    latest = float(os.environ.get("CHAOS_TORCH_LATEST", "1.0"))
    return [Fault(c, 1 if c == "kill-node" else rng.randrange(2), "step",
                  rng.randrange(1, max(2, int(latest * TORCH_STEPS))))
            for c in (rng.choice(TORCH_CLASSES) for _ in range(rng.choice([1, 1, 2])))]


def draw(rng, root_ok):
    faults = []
    classes = usable_classes(root_ok)
    for _ in range(rng.choice([1, 1, 2, 2, 3])):
        f = draw_one(rng, rng.choice(classes))
        if f.cls in WHOLE_RUN and any(g.cls == f.cls and g.node == f.node for g in faults):
            continue
        if f.cls == "store-lost" and any(g.cls == f.cls for g in faults):
            continue  # (a second member lost ends the quorum: no rendezvous survives that)
        faults.append(f)
    # a lost host takes its etcd member with it: a member lost besides is that one (two
    # of three members lost end the quorum, and no rendezvous survives that)
    if any(f.cls == "host-lost" for f in faults):
        for f in faults:
            if f.cls == "store-lost":
                f.node = 1
    # with both nodes' --ckpt-dir unusable the job must stop, joiner or not
    unusable = {f.node for f in faults if f.cls in UNUSABLE}
    if len(unusable) == 2:
        faults = [f for f in faults if f.cls not in RESIZE] or faults[:1]
    return with_a_first(rng, faults)


def with_a_first(rng, faults):
    """A schedule whose struck faults all wait for a recovery has none to
    start one: the first becomes a step's. (And a leave without a join
    strikes node 1: there is no node 2 to leave.)"""
    if not any(f.cls == "join" for f in faults):
        for f in faults:
            if f.cls == "leave":
                f.node = 1
    timed = [f for f in faults if f.cls not in WHOLE_RUN]
    if timed and all(f.moment == "recovery" for f in timed):
        timed[0].moment, timed[0].step = "step", rng.randrange(1, TOTAL)
    return faults


def progress(logs):
    """The last global step any log shows done, how many evaluation results
    were printed, and how many restarts began."""
    best, evals, restarts = 0, 0, 0
    for path in logs:
        try:
            with open(path, errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        for e, s in re.findall(r"epoch (\d+)/\d+ step (\d+)/\d+", text):
            best = max(best, (int(e) - 1) * STEPS_PER_EPOCH + int(s))
        for s in re.findall(r"^step (\d+)/\d+$", text, re.M):  # the PyTorch script's
            best = max(best, int(s))
        evals = max(evals, len(re.findall(r"epoch \d+ test:", text)))
        restarts += len(re.findall(r"stopping the group|re-forming the group", text))
    return best, evals, restarts


def trigger_reached(f, step, evals, elapsed=0.0, restarts=0):
    if f.moment == "recovery":
        return restarts > 0
    if f.moment == "time":
        return elapsed >= f.step / 1000
    if f.moment in ("step", "coll"):  # (coll: then inside one, Job.inside_collective)
        return step >= f.step
    if f.moment == "eval":  # the first epoch's last step: its evaluation runs now
        return step >= STEPS_PER_EPOCH
    if f.moment == "save":  # the first evaluation printed: its checkpoint is written now
        return evals >= 1
    if f.moment == "final":
        return step >= TOTAL
    return True


class Job:
    """One schedule's job: two agents, restarted as the faults say."""

    def __init__(self, work, tag, faults, slow_so):
        self.work, self.tag, self.faults, self.slow_so = work, tag, faults, slow_so
        self.port = store_port()
        self.agents = [None, None, None]  # nodes 0 and 1, and JOINER once it joins
        self.host = {0: 1, 1: 2, JOINER: 3}  # --net: each node's host on the bed
        self.joined, self.gone = False, set()  # a join struck; the nodes a leave took
        for i in range(1, BED.n + 1) if BED else []:  # (a host lost before is back: a new one)
            BED.link(i, "up")
        if ETCD:  # (and a member lost before)
            ETCD.ensure()
        # a resize: nodes may join and leave (a node lost is not waited for)
        self.nnodes = "1:3" if any(f.cls in RESIZE for f in faults) else "2"
        self.logs = []
        self.ended = []  # (node, log, exit code) of every agent that ended
        self.run_id = f"chaos-{tag}"

    def dirs(self, node):
        return os.path.join(self.work, f"ckpt{node}"), os.path.join(self.work, f"shm{node}")

    def start(self, node):
        ckpt, shm = self.dirs(node)
        os.makedirs(shm, exist_ok=True)
        log = os.path.join(self.work, f"agent{node}.{len(self.logs)}.log")
        self.logs.append(log)
        env = dict(os.environ, PATH=BIN + ":" + os.environ["PATH"], DDPRUN_SHM_DIR=shm,
                   CHAOS_TAG=f"{os.getpid()}:{self.tag}", TORCHELASTIC_ENABLE_FILE_TIMER="1",
                   OMP_NUM_THREADS="1")
        if WORKLOAD == "torch":
            program = ["--no-python", TORCH_PY, os.path.join(ROOT, "examples", "snapshot_resume.py"),
                       "--steps", str(TORCH_STEPS), "--step-ms", "10", "--log-every", "1"]
        else:
            program = ["--no-python", os.path.join(BIN, "ddp-train")] + TRAIN + [
                "--ckpt-dir", ckpt, "--sample-log", os.path.join(self.work, "samples")]
        store = BED.addr(self.host[0]) if BED else "127.0.0.1"
        cmd = [os.path.join(BIN, "ddprun"), f"--nnodes={self.nnodes}", "--nproc-per-node=1",
               # on the bed: a node cut off is lost after 2 s (a 0.8 s flap is not)
               "--rdzv-conf=last_call_timeout=1" + (",heartbeat=2" if BED else ""),
               ] + (["--rdzv-backend=etcd-v3", f"--rdzv-endpoint={ETCD.endpoints()}"] if ETCD else
                    ["--rdzv-backend=c10d", f"--rdzv-endpoint={store}:{self.port}"]) + [
               f"--rdzv-id={self.run_id}", f"--node-rank={node}", "--max-restarts=20",
               "--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
               "--monitor-interval=0.1", f"--log-dir={os.path.join(self.work, f'logs{node}')}"
               ] + program
        if any(f.cls == "slow-disk" and f.node == node for f in self.faults):
            env.update(LD_PRELOAD=self.slow_so, SLOW_FSYNC_MS="300", SLOW_FSYNC_PATH=ckpt)
        if any(f.cls == "foreign-ckpt" and f.node == node for f in self.faults):
            os.makedirs(ckpt, exist_ok=True)
            if not os.path.exists(os.path.join(ckpt, os.path.basename(FOREIGN))):
                shutil.copy(FOREIGN, ckpt)
        if any(f.cls == "disk-full" and f.node == node for f in self.faults):
            os.makedirs(ckpt, exist_ok=True)
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                   'mount -t tmpfs -o size=1m chaos "$0" && exec "$@"', ckpt] + cmd
        if any(f.cls == "read-only" and f.node == node for f in self.faults):
            os.makedirs(ckpt, exist_ok=True)
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                   'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
                   ckpt] + cmd
        if BED:
            cmd = BED.wrap(self.host[node], cmd)
        out = open(log, "w")
        self.agents[node] = (subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                              start_new_session=True), log)
        out.close()
        if node == 0 and not BED and not ETCD:  # node 0 hosts the c10d store: up before node 1 looks
            deadline = time.time() + 10
            while time.time() < deadline and self.agents[0][0].poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.02)

    def start_unless_over(self, node, why):
        """Starts node's agent; "" if the job still runs 0.3 s later, else
        why (then the agent is stopped: with node 0's agent its store is
        gone, and the newcomer would wait the join timeout for it)."""
        self.start(node)
        time.sleep(0.3)
        if self.agents[0] and self.agents[0][0].poll() is None:
            return ""
        os.killpg(self.agents[node][0].pid, signal.SIGKILL)
        self.reap(node, 10, struck=True)
        return why

    def inside_collective(self, node, tries=200):
        """Whether node's worker (node 0's where that node has none) is
        inside a collective now: its collective record (DDPRUN_COLL_RECORD,
        read with coll-peek) shows one entered and not finished. Looks a
        few times in a row, so that a strike lands there."""
        kids = self.workers(node) or self.workers(0)
        record = None
        for pid in kids:
            m = re.search(r"(?:^| )DDPRUN_COLL_RECORD=(\S+)", proc_text(pid, "environ"))
            record = m.group(1) if m else record
        for _ in range(tries if record else 0):
            out = subprocess.run([COLL_PEEK, record], capture_output=True, text=True).stdout.split()
            if len(out) >= 2 and int(out[0]) > int(out[1]):
                return True
        return False

    def workers(self, node):
        if not self.agents[node]:  # (left, or preempted and not requeued)
            return []
        p = self.agents[node][0]
        try:
            with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            return []
        return kids  # (under unshare: unshare and sh exec ddprun, the same pid)

    def reap(self, node, timeout, struck=False):
        """The agent's exit code (None: still running); struck: killed by a
        fault, so its own exit code says nothing about the job."""
        p, log = self.agents[node]
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self.ended.append((node, log, None if struck else rc))
        self.agents[node] = None
        return rc

    def inject(self, f):
        if f.cls == "kill-worker" or f.cls == "hang-worker":
            kids = self.workers(f.node)
            if not kids:
                return "no worker to strike"
            before = proc_state(kids[-1])
            os.kill(kids[-1], signal.SIGKILL if f.cls == "kill-worker" else signal.SIGSTOP)
            if before in ("Z", "X", "?"):
                return "the worker had already exited"
            if f.cls == "hang-worker":
                time.sleep(0.01)
                if proc_state(kids[-1]) not in ("T", "t"):
                    return "the worker was exiting: not stopped"
            return ""
        if f.cls == "kill-node":
            if not self.agents[f.node] or self.agents[f.node][0].poll() is not None:
                return "the node's agent had ended"
            os.killpg(self.agents[f.node][0].pid, signal.SIGKILL)
            self.reap(f.node, 10, struck=True)
            time.sleep(0.3)
            other = self.agents[1 - f.node]
            if not other or other[0].poll() is not None:
                return "the other node had ended: the job is over, no node to replace"
            return self.start_unless_over(f.node, "the job ended as its replacement came")
        if f.cls == "store-lost":  # etcd member m<node+1>'s machine: 2 of 3 keep the quorum
            return "" if ETCD.kill(f.node + 1) else "the member had stopped"
        if f.cls == "link-flap":  # packets lost for 0.8 s, then all is as before
            BED.link(self.host[f.node], "down")
            time.sleep(0.8)
            BED.link(self.host[f.node], "up")
            return ""
        if f.cls == "host-lost":  # the machine dies without a word; a spare replaces it
            if not self.agents[f.node] or self.agents[f.node][0].poll() is not None:
                return "the node's agent had ended"
            if self.host[f.node] == SPARE_HOST:
                return "no spare host left"
            BED.link(self.host[f.node], "down")
            os.killpg(self.agents[f.node][0].pid, signal.SIGKILL)
            self.reap(f.node, 10, struck=True)
            ckpt, shm = self.dirs(f.node)  # its disk and memory went with it
            for d in (ckpt, shm):
                if os.path.isdir(d):
                    os.rename(d, d + "-lost")
            time.sleep(0.3)
            other = self.agents[1 - f.node]
            if not other or other[0].poll() is not None:
                return "the other node had ended: the job is over, no node to replace"
            self.host[f.node] = SPARE_HOST
            return self.start_unless_over(f.node, "the job ended as its replacement came")
        if f.cls == "join":
            if self.agents[f.node]:
                return f"node {f.node} is in the job already"
            if not self.agents[0] or self.agents[0][0].poll() is not None:
                return "the job had ended"
            why = self.start_unless_over(f.node, "the job ended as node 2 came")
            if why:
                return why
            self.joined = True
            self.gone.discard(f.node)
            return ""
        if f.cls == "leave":  # the node drained: its agent told to stop, not replaced
            if not self.agents[f.node] or self.agents[f.node][0].poll() is not None:
                return f"node {f.node} is not in the job"
            self.agents[f.node][0].send_signal(signal.SIGTERM)
            self.reap(f.node, 60, struck=True)
            self.gone.add(f.node)
            return ""
        if f.cls in PREEMPT:  # every node; the requeue is the job as submitted
            live = [n for n in range(3) if self.agents[n] and self.agents[n][0].poll() is None]
            for n in live:
                self.agents[n][0].send_signal(PREEMPT[f.cls])
            rcs = []
            for n in range(3):  # (the joiner, not requeued, ends with the signal's code)
                if self.agents[n]:
                    rcs.append(self.reap(n, 60, struck=n == JOINER))
            if not live:
                return "the job had ended"
            ended = "" if any(rc != 0 for rc in rcs) else "the job ended as it struck"
            # the requeue: the whole job again, resuming from its nodes' disks
            self.port = store_port()
            for n in (0, 1):
                self.start(n)
            self.gone = {JOINER} if self.joined else set()
            return ended
        return ""

    def kill_all(self):
        for a in self.agents:
            if a:
                try:
                    os.killpg(a[0].pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                a[0].wait()


def proc_state(pid):
    """A process's state letter (R, S, T, Z, ...), '?' when it is gone."""
    text = proc_text(pid, "stat")
    return text[text.rfind(")") + 2] if ")" in text else "?"


def proc_text(pid, name):
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def tagged(tag):
    left = []
    for env in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(env, "rb") as f:
                # (this campaign's: another one's schedule of the same seed and number
                # is no leftover of ours)
                if f"CHAOS_TAG={os.getpid()}:{tag}".encode() in f.read().split(b"\0"):
                    left.append(int(env.split("/")[2]))
        except OSError:
            pass
    return left


def redone(log):
    with open(log, errors="replace") as f:
        m = re.findall(r"redone [0-9.]+ s \((\d+) steps?\)", f.read())
    return int(m[-1]) if m else 0


# What the logs must say of each fault struck alone (no other within
# ALONE_S): the failure named where the job carried on after it.
NAMED = {
    "kill-worker": r"failed: Signal 9 \(SIGKILL\)|killed on its way out \(signal 9\)",
    "hang-worker": r"stopped by the worker watchdog|killed on its way out \(signal 9\)",
    # (on etcd a node's heartbeat lapses after its peers' collectives fail: they name it)
    # (off the bed both nodes share a host: a worker names its peer there)
    "kill-node": r"a node left|lost at the exit barrier|node is waiting to join|"
                 r"closed its connection \(it exited or failed\)|"
                 r"on this host exited during the collective",
    "host-lost": r"a node left|lost at the exit barrier|node is waiting to join|"
                 r"closed its connection \(it exited or failed\)|stopped answering",
    "preempt": r"SIGTERM received: forwarding it to the workers",
    "preempt-usr1": r"SIGUSR1 received: forwarding it to the workers",
}
ALONE_S = 2.0


def unnamed(logs, struck):
    """The faults struck alone that no log names."""
    text = ""
    for path in logs:
        try:
            with open(path, errors="replace") as f:
                text += f.read()
        except OSError:
            pass
    out = []
    for cls, at, excused in struck:
        if excused or cls not in NAMED:
            continue
        if any(abs(at - t) < ALONE_S and (c, t) != (cls, at) for c, t, _ in struck):
            continue
        if not re.search(NAMED[cls], text):
            out.append(cls)
    return out


def samples_kept(dirpath):
    """From the ranks' --sample-log lines: the node counts the kept steps
    trained with, and what is wrong. A step's kept lines are its newest
    attempt's: the newest line's world, and each of its ranks' newest line
    of that world (every rank writes its line before the step's all-reduce,
    so a kept step has them all). Every step must be there, and every
    sample of every epoch trained exactly once."""
    lines = {}
    for path in glob.glob(os.path.join(dirpath, "samples.*.log")):
        with open(path) as f:
            for line in f:
                t, e, pos, step, world, rank, idx = line.split()
                lines.setdefault(int(step), []).append(
                    (int(t), int(e), int(world), int(rank), [int(i) for i in idx.split(",")]))
    worlds, wrong, seen = set(), [], {}
    for step in range(1, TOTAL + 1):
        if step not in lines:
            wrong.append(f"samples: no rank logged step {step}")
            continue
        newest = max(lines[step])
        world, ranks = newest[2], {}
        for rec in sorted(lines[step]):
            if rec[2] == world:
                ranks[rec[3]] = rec
        if sorted(ranks) != list(range(world)):
            wrong.append(f"samples: step {step} ({world} ranks) has lines of ranks {sorted(ranks)}")
        worlds.add(world)
        for rec in ranks.values():
            for i in rec[4]:
                seen.setdefault(rec[1], []).append(i)
    n = STEPS_PER_EPOCH * 32
    for e in range(EPOCHS):
        got = sorted(seen.get(e, []))
        if got != list(range(n)):
            twice = len(got) - len(set(got))
            wrong.append(f"samples: epoch {e + 1} trained {len(set(got))} of its {n} samples, "
                         f"{twice} more than once")
    return worlds, wrong[:5]


def said_no_keeper(logs):
    return any("no node can keep this job's checkpoints" in open(l, errors="replace").read()
               for l in logs)


def too_late(log):
    """Whether a joiner came after the job's end: its rendezvous said so
    and it started no worker."""
    with open(log, errors="replace") as f:
        text = f.read()
    return "is closed: the job has finished" in text and "started 1 worker" not in text


def final_loss(logs):
    """The last evaluation's test loss any log printed."""
    found = None
    for path in logs:
        with open(path, errors="replace") as f:
            for m in re.finditer(rf"epoch {EPOCHS} test: loss ([0-9.]+)", f.read()):
                found = float(m.group(1))
    return found


def digest(path):
    out = subprocess.run([os.path.join(BIN, "ddp-train"), "inspect", path], capture_output=True,
                         text=True)
    if out.returncode:
        return None
    return json.loads(out.stdout).get("weights_digest")


def run_schedule(faults, tag, base, reference, slow_so):
    """Runs one schedule; returns the list of the oracle's complaints."""
    work = tempfile.mkdtemp(prefix=f"chaos-{tag}.", dir=base)
    job = Job(work, tag, faults, slow_so)
    bad, struck, strikes, torch_strikes = [], [], [], []
    try:
        job.start(0)
        job.start(1)
        pending = sorted([f for f in faults if f.cls not in WHOLE_RUN],
                         key=lambda f: (f.moment != "step", f.step))
        t0 = time.time()
        deadline = t0 + JOB_TIMEOUT
        while time.time() < deadline:
            step, evals, restarts = progress(job.logs)
            for f in list(pending):
                if trigger_reached(f, step, evals, time.time() - t0, restarts) and (
                        f.moment != "coll" or job.inside_collective(f.node)):
                    pending.remove(f)
                    at = time.time()
                    why = job.inject(f)
                    when = f"{time.time() - t0:.2f} s" if f.moment == "time" else f"step {step}"
                    struck.append(f"{f.cls} at {when}" + (f" ({why})" if why else ""))
                    # (a node lost while the group re-forms may never be missed:
                    # its replacement can join the new round before anyone
                    # waits for it, and then no log has anything to name)
                    lost_unmissed = f.moment == "recovery" and f.cls in ("kill-node", "host-lost")
                    strikes.append((f.cls, at, bool(why) or lost_unmissed))
                    torch_strikes.append((f.cls, step, bool(why)))
            if all(a is None or a[0].poll() is not None for a in job.agents):
                break  # (a preemption restarts the job inside inject: none is pending then)
            time.sleep(0.02)
        for n in range(3):
            if job.agents[n] and job.reap(n, max(1, deadline - time.time())) is None:
                bad.append(f"node {n}'s agent still running after {JOB_TIMEOUT} s")
        if any(job.agents):  # what each of the job's processes waits in, for the look
            with open(os.path.join(work, "hung.txt"), "w") as out:
                for pid in tagged(tag):
                    out.write(f"pid {pid}: {proc_text(pid, 'cmdline')}\n")
                    for task in sorted(os.listdir(f"/proc/{pid}/task")):
                        out.write(f"  thread {task} ({proc_text(pid, f'task/{task}/comm')}): "
                                  f"{proc_text(pid, f'task/{task}/wchan')}\n")
        job.kill_all()
        # the oracle; a node whose --ckpt-dir is full or another job's keeps
        # no checkpoints: with both so, the job must stop, saying so
        full = {f.node for f in faults if f.cls in UNUSABLE}
        last = {}  # each node's newest agent, unless a fault ended it (then none is judged)
        for node, log, rc in job.ended:
            last[node] = (log, rc)
        last = {node: lr for node, lr in last.items() if lr[1] is not None}
        if WORKLOAD == "torch":
            for node, (log, rc) in sorted(last.items()):
                if rc != 0:
                    bad.append(f"node {node}'s agent exited {rc} ({os.path.basename(log)})")
            resumed = []
            for path in job.logs:
                with open(path, errors="replace") as fh:
                    resumed += re.findall(r"resuming from step (\d+)", fh.read())
            struck.append("resumed from step " + ", ".join(resumed) if resumed else
                          "no resume (struck before the first snapshot)")
            # at most the step under way lost: a fault seen after step k (its
            # "step k/N" line, the state of step index k-1 kept) resumes from
            # index k-1 or later (paired in order, where each made a restart)
            hits = sorted(k for _, k, excused in torch_strikes if not excused)
            if len(hits) == len(resumed):
                for k, r in zip(hits, sorted(int(x) for x in resumed)):
                    if r < k - 1:
                        bad.append(f"struck after step {k}, resumed from step index {r}: "
                                   f"{k - 1 - r} steps lost")
            got = torch_final(job.logs)
            if got != reference:
                bad.append(f"final weights {got}, not the uninterrupted run's {reference}")
        elif len(full) == 2 and not job.joined:
            if all(rc == 0 for _, rc in last.values()):
                bad.append("no node could keep checkpoints, yet the job exited 0")
            elif not said_no_keeper(job.logs):
                bad.append("no node could keep checkpoints, and no log says so")
        elif not ({0, 1, JOINER} if job.joined else {0, 1}) - job.gone - full and any(
                rc != 0 for _, rc in last.values()):
            # the nodes that could keep checkpoints left: the job may stop, saying so
            # (or it had finished, and then ends 0 as any job)
            struck.append("the nodes that could keep checkpoints left")
            if not said_no_keeper(job.logs):
                bad.append("no node left could keep checkpoints, and no log says why the job "
                           "stopped")
        else:
            for node, (log, rc) in sorted(last.items()):
                if rc != 0 and too_late(log):  # (a joiner, or a replacement, late)
                    struck.append(f"node {node} came after the job's end (torchrun's closed "
                                  f"rendezvous: exit 1, said)")
                elif rc != 0:
                    bad.append(f"node {node}'s agent exited {rc} ({os.path.basename(log)})")
            finals = [p for n in range(3) if n not in full
                      for p in glob.glob(os.path.join(job.dirs(n)[0], f"ckpt-{TOTAL:010d}.ddpt"))]
            if not finals:
                bad.append(f"no node holds the final checkpoint (step {TOTAL})")
            worlds, wrong = samples_kept(os.path.join(work, "samples"))
            bad += wrong
            if worlds and worlds != {2}:  # resized: other sums, per-rank batch norm
                struck.append("trained on " + "/".join(f"{w} nodes" for w in sorted(worlds)))
                loss = final_loss(job.logs)
                struck.append(f"final test loss {loss} (uninterrupted {REF_LOSS})")
                if loss is None:
                    bad.append("no log shows the last evaluation's loss")
                elif abs(loss - REF_LOSS) > LOSS_TOL * REF_LOSS:
                    bad.append(f"resized: final test loss {loss}, more than {LOSS_TOL:.0%} off "
                               f"the uninterrupted run's {REF_LOSS}")
            for p in finals if worlds == {2} else []:
                d = digest(p)
                if d != reference:
                    bad.append(f"{os.path.relpath(p, work)}: digest {d}, not the uninterrupted "
                               f"run's {reference}")
        for cls in unnamed(job.logs, strikes) if len(full) < 2 and WORKLOAD != "torch" else []:
            bad.append(f"no log names the {cls}")
        nfaults = len([f for f in faults if f.cls not in WHOLE_RUN])
        for node, log, rc in job.ended if len(full) < 2 and WORKLOAD != "torch" else []:  # (a job that cannot go on
            r = redone(log)                                    # redoes what it may)
            if r > max(nfaults, 0):
                bad.append(f"{os.path.basename(log)}: {r} steps redone for {nfaults} faults")
        time.sleep(0.5)
        left = tagged(tag)
        if left:
            bad.append(f"processes left: {left}")
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        for n in range(3):
            shm = job.dirs(n)[1]
            if os.path.isdir(shm) and os.listdir(shm):
                bad.append(f"left in node {n}'s memory root: {os.listdir(shm)}")
    finally:
        job.kill_all()
        if bad or KEEP:
            keep = os.path.join(base, f"{'failed' if bad else 'kept'}-{tag}")
            shutil.rmtree(keep, ignore_errors=True)
            shutil.move(work, keep)
            print(f"       logs in {keep}") if not bad else bad.append(f"logs in {keep}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return bad, struck


def foreign_checkpoint(base):
    """Another job's checkpoint (--seed 1, 8 steps), renamed to a step past
    this job's last: what a node's leftover directory may hold."""
    work = os.path.join(base, "foreign")
    args = list(TRAIN)
    args[args.index("--seed") + 1] = "1"
    out = subprocess.run([os.path.join(BIN, "ddp-train")] + args + [
        "--max-steps", "8", "--ckpt-dir", work, "--no-eval"],
        capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    src = os.path.join(work, "ckpt-0000000008.ddpt")
    if out.returncode or not os.path.exists(src):
        sys.exit(f"chaos: cannot make another job's checkpoint: {out.stdout[-2000:]}")
    dst = os.path.join(base, f"ckpt-{TOTAL + 100:010d}.ddpt")
    os.rename(src, dst)
    return dst


def torch_final(logs):
    """The final weights the PyTorch script's rank 0 printed (its last run's)."""
    found = None
    for path in logs:
        with open(path, errors="replace") as f:
            for m in re.finditer(r"final step \d+ weights (\S+)", f.read()):
                found = m.group(1)
    return found


def reference_digest(base):
    global TORCH_TIME
    work = tempfile.mkdtemp(prefix="chaos-ref.", dir=base)
    try:
        job = Job(work, "ref", [], "")
        t0 = time.time()
        job.start(0)
        job.start(1)
        rcs = [job.reap(n, JOB_TIMEOUT) for n in (0, 1)]
        if rcs != [0, 0]:
            sys.exit(f"chaos: the uninterrupted run failed ({rcs}); logs: "
                     + " ".join(open(l).read()[-2000:] for l in job.logs))
        if WORKLOAD == "torch":
            TORCH_TIME = time.time() - t0
            return torch_final(job.logs)
        global REF_LOSS  # and the oracle's samples, checked on the run it knows is right
        worlds, wrong = samples_kept(os.path.join(work, "samples"))
        REF_LOSS = final_loss(job.logs)
        if worlds != {2} or wrong or REF_LOSS is None:
            sys.exit(f"chaos: the uninterrupted run fails the oracle: trained on {worlds} nodes, "
                     f"{wrong}, final loss {REF_LOSS}")
        return digest(os.path.join(job.dirs(0)[0], f"ckpt-{TOTAL:010d}.ddpt"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def shrink(faults, tag, base, reference, slow_so):
    """The fewest of faults that still break the oracle (one removed at a time)."""
    cur = list(faults)
    changed = True
    while changed and len(cur) > 1:
        changed = False
        for i in range(len(cur)):
            fewer = cur[:i] + cur[i + 1:]
            if run_schedule(fewer, f"{tag}-s{len(fewer)}{i}", base, reference, slow_so)[0]:
                cur, changed = fewer, True
                break
    return cur


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--replay")
    ap.add_argument("--classes", help="only these classes, comma-separated")
    ap.add_argument("--workload", choices=["ddp-train", "torch"], default="ddp-train")
    ap.add_argument("--keep", action="store_true", help="keep every schedule's logs")
    ap.add_argument("--cover", action="store_true",
                    help="the first schedules take each class in turn (then at random)")
    ap.add_argument("--net", action="store_true",
                    help="the nodes on a network test bed (root): link flaps and lost hosts too")
    ap.add_argument("--store", choices=["c10d", "etcd"], default="c10d",
                    help="the rendezvous: c10d (node 0 hosts it) or a 3-member etcd cluster "
                         "(store-lost too)")
    a = ap.parse_args()
    global BED, ETCD
    if a.net and a.workload != "torch":
        try:
            BED = Bed(SPARE_HOST)
        except OSError as e:
            print(f"chaos: no network faults (link-flap, host-lost): cannot make the network "
                  f"test bed: {e}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (the bed comes down)
    try:
        if a.store == "etcd":
            if not shutil.which("etcd") or not shutil.which("etcdctl"):
                print("chaos: skipped: --store etcd needs etcd and etcdctl (Debian's etcd-server, "
                      "etcd-client)")
                return 77
            ETCD = Etcd(tempfile.mkdtemp(prefix="ddprun-chaos-etcd."))
        return campaign(a)
    finally:
        if ETCD:
            ETCD.stop()
            shutil.rmtree(os.path.dirname(ETCD.dir), ignore_errors=True)
        if BED:
            BED.down()


def campaign(a):
    global WORKLOAD, KEEP
    WORKLOAD, KEEP = a.workload, a.keep
    if WORKLOAD == "torch" and subprocess.run([TORCH_PY, "-c", "import torch"],
                                              capture_output=True).returncode:
        print(f"chaos: skipped: {TORCH_PY} has no torch (TORCH_PY names another python)")
        return 77
    for b in ("ddprun", "ddp-train"):
        if not os.access(os.path.join(BIN, b), os.X_OK):
            sys.exit(f"chaos: build/bin/{b} is not built (make)")
    replayed = [Fault.parse(x) for x in a.replay.split(",")] if a.replay else None
    root_ok = os.geteuid() == 0 and shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode == 0
    base = tempfile.mkdtemp(prefix="ddprun-chaos.")
    slow_so = os.path.join(base, "slow_fsync.so")
    if subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", slow_so,
                       os.path.join(ROOT, "bench", "slow_fsync.c"), "-ldl"]).returncode:
        sys.exit("chaos: cannot build bench/slow_fsync.c")
    if not root_ok:
        print("chaos: not root, or no mount namespace here: no disk-full or read-only faults")
    global FOREIGN
    FOREIGN = foreign_checkpoint(base)
    reference = reference_digest(base)
    print(f"chaos: seed {a.seed}, {TOTAL} steps a job, the uninterrupted run's digest {reference}",
          flush=True)
    if replayed:
        schedules = [replayed]
    else:
        schedules = []
        for i in range(a.runs):
            rng = random.Random(f"{a.seed}:{i}")
            fs = draw(rng, root_ok) if WORKLOAD != "torch" else draw_torch(rng)
            usable = usable_classes(root_ok)
            if WORKLOAD == "torch":
                usable = TORCH_CLASSES
            if a.cover and i < len(usable) and WORKLOAD != "torch":
                fs = with_a_first(rng, [draw_one(rng, usable[i])] +
                                  [f for f in fs[1:] if f.cls not in WHOLE_RUN])
            elif a.cover and i < len(usable):
                fs = [Fault(usable[i], 1, "step", fs[0].step)] + fs[1:]
            if a.classes:
                fs = [f for f in fs if f.cls in a.classes.split(",")] or fs
            schedules.append(fs)
    stats = {}
    failed = 0
    t0 = time.time()
    for i, faults in enumerate(schedules):
        spec = ",".join(str(f) for f in faults)
        s0 = time.time()
        bad, struck = run_schedule(faults, f"{a.seed}-{i}", base, reference, slow_so)
        verdict = "ok  " if not bad else "FAIL"
        timed = any(f.cls not in WHOLE_RUN for f in faults)
        print(f"{verdict} {i:4d} {spec} ({time.time() - s0:.1f} s; "
              f"{'; '.join(struck) or ('nothing struck' if timed else 'from the start')})",
              flush=True)
        for f in faults:
            key = (f.cls, "start" if f.cls in WHOLE_RUN else f.moment)
            drawn, broke = stats.get(key, (0, 0))
            stats[key] = (drawn + 1, broke + (1 if bad else 0))
        if bad:
            failed += 1
            for b in bad:
                print(f"       {b}")
            least = shrink(faults, f"{a.seed}-{i}", base, reference, slow_so)
            least_spec = ",".join(str(f) for f in least)
            flags = (" --net" if BED else "") + (" --store etcd" if ETCD else "")
            print(f"       shrunk to {least_spec}; replay: tests/chaos/chaos.py "
                  f"--workload {WORKLOAD}{flags} --replay '{least_spec}'", flush=True)
    print(f"chaos: {len(schedules)} schedules in {time.time() - t0:.0f} s, {failed} broke the "
          f"oracle")
    print(f"{'class':12s} {'moment':7s} {'drawn':>6s} {'broke':>6s}")
    for (cls, moment), (drawn, broke) in sorted(stats.items()):
        print(f"{cls:12s} {moment:7s} {drawn:6d} {broke:6d}")
    if not failed and not KEEP:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
