"""Drives a store server through the operations that torch 2.x's TCPStore
client has and torch 1.13's lacks: check, append, multi_get/multi_set,
queue_push/queue_pop/queue_len, list_keys, barrier, clone, and a wait that
times out and leaves its connection usable (CANCEL_WAIT). Every result is
asserted. Run by tests/compat/torch_client_ext.sh, first against torch's own
server (which shows that what is asserted here is what torch does), then
against ddprun-store.

Usage: torch_client_ext.py HOST PORT
       torch_client_ext.py --missing   (says what this torch's client lacks, if anything)
Exit 0 when every check passes; 1 with the failed check on stderr.
"""
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

OPS = ["check", "append", "multi_get", "multi_set", "queue_push", "queue_pop", "queue_len",
       "list_keys", "barrier", "clone"]


HOST, PORT = None, None


def client(timeout_s=10):
    return dist.TCPStore(HOST, PORT, is_master=False, timeout=timedelta(seconds=timeout_s))


def check(what, got, want):
    if got != want:
        print(f"FAIL {what}: got {got!r}, want {want!r}", file=sys.stderr)
        sys.exit(1)
    print(f"ok {what}")


def raises(f):
    """The exception f raises, or None; it is printed so the log shows it."""
    try:
        f()
    except Exception as e:  # torch raises DistStoreError, QueueEmptyError, ...
        print(f"   ({type(e).__name__}: {str(e).splitlines()[0]})")
        return e
    return None


def timed(f):
    t0 = time.monotonic()
    r = f()
    return r, time.monotonic() - t0


def later(delay_s, f):
    """Runs f on a thread of its own after delay_s; returns the thread."""
    def run():
        time.sleep(delay_s)
        f()
    t = threading.Thread(target=run)
    t.start()
    return t


def values_and_lists(s):
    s.set("a", "1")
    check("check: an existing key", s.check(["a"]), True)
    check("check: one key missing", s.check(["a", "nope"]), False)
    s.append("ap", "x")
    check("append creates a missing key", s.get("ap"), b"x")
    s.append("ap", "yz")
    check("append appends", s.get("ap"), b"xyz")
    s.multi_set(["m1", "m2"], ["v1", "v2"])
    check("multi_set then multi_get, in request order", s.multi_get(["m2", "a", "m1"]),
          [b"v2", b"1", b"v1"])
    # The client waits for every key first: a missing one times out.
    e = raises(lambda: client(1).multi_get(["m1", "nope"]))
    check("multi_get with a missing key times out", e is not None, True)
    check("list_keys (torch strips its '/' prefix)", sorted(s.list_keys()),
          ["a", "ap", "m1", "m2"])
    check("num_keys", s.num_keys(), 4)


def queues(s):
    check("queue_len of a queue never pushed", s.queue_len("q"), 0)
    e = raises(lambda: s.queue_pop("q", False))
    check("non-blocking queue_pop of an empty queue raises", e is not None, True)
    for v in ["q1", "q2", "q3"]:
        s.queue_push("q", v)
    check("queue_len after 3 pushes", s.queue_len("q"), 3)
    check("check counts a non-empty queue as existing", s.check(["q"]), True)
    check("a queue is not a key (num_keys)", s.num_keys(), 4)
    check("a queue is not a key (list_keys)", "q" in s.list_keys(), False)
    check("queue_pop (blocking) takes the oldest", s.queue_pop("q"), b"q1")
    check("queue_pop (non-blocking) takes the next", s.queue_pop("q", False), b"q2")
    check("queue_len after 2 pops", s.queue_len("q"), 1)
    # get waits for the key (the queue makes it exist) and then finds no value.
    check("get of a queue's name: no value", client(2).get("q"), b"")
    t = later(0.5, lambda: client().queue_push("bq", "late"))
    v, took = timed(lambda: s.queue_pop("bq"))
    t.join()
    check("blocking queue_pop gets a later push", v, b"late")
    check("blocking queue_pop waited for it", took >= 0.4, True)
    e, took = timed(lambda: raises(lambda: client(1).queue_pop("never-q")))
    check("blocking queue_pop of a queue never pushed times out", e is not None, True)
    check("... after about its timeout (1 s)", 0.9 <= took < 5, True)


def barriers(s):
    # Three parties: two on threads of their own, the third this client.
    done = []
    ts = [later(0, lambda: (client().barrier("b3", 3), done.append(1))) for _ in range(2)]
    time.sleep(0.3)
    check("barrier: two of three are still waiting", len(done), 0)
    check("barrier: the third releases all", s.barrier("b3", 3), None)
    for t in ts:
        t.join(5)
    check("barrier: both waiters released", len(done), 2)
    # torch's server keeps the count in the key's value, visible like any key.
    check("barrier key holds its count", s.get("b3"), b"3")
    check("barrier key is listed", "b3" in s.list_keys(), True)
    _, took = timed(lambda: s.barrier("b3", 3))
    check("entering the same barrier again passes at once", took < 1, True)
    check("... and counts", s.get("b3"), b"4")
    e, took = timed(lambda: raises(lambda: client(1).barrier("alone", 2, timedelta(seconds=1))))
    check("a barrier nobody else enters times out", e is not None, True)
    check("... after about its timeout (1 s)", 0.9 <= took < 5, True)


def waits(s):
    e, took = timed(lambda: raises(lambda: s.wait(["never"], timedelta(seconds=1))))
    check("wait with a timeout raises", e is not None, True)
    check("... after about its timeout (1 s)", 0.9 <= took < 5, True)
    # torch 2.x cancels the wait (CANCEL_WAIT) and keeps its connection.
    check("the same client works after a wait timed out", s.get("a"), b"1")
    t = later(0.3, lambda: client().set("late", "here"))
    s.wait(["late"])
    t.join()
    check("the same client waits again", s.get("late"), b"here")
    c = s.clone()
    check("clone reads through a connection of its own", c.get("ap"), b"xyz")
    check("delete_key", c.delete_key("ap"), True)
    check("delete_key of a deleted key", s.delete_key("ap"), False)


def main():
    global HOST, PORT
    missing = [op for op in OPS if not hasattr(dist.TCPStore, op)]
    if sys.argv[1] == "--missing":
        if missing:
            print(f"torch {torch.__version__}'s TCPStore has no {', '.join(missing)} "
                  "(torch 2.x's client; run scripts/torch2-venv, then make check-torch2)")
        return 0
    HOST, PORT = sys.argv[1], int(sys.argv[2])
    s = client()
    check("the store starts empty", s.num_keys(), 0)
    values_and_lists(s)
    queues(s)
    barriers(s)
    waits(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
