#!/usr/bin/python3
"""Drives a store server through PyTorch's own TCPStore client and asserts
every result, using only what every torch's client has: Debian's torch 1.13
(the old protocol generation) and torch 2.x (the current one) run it alike.
Run by tests/compat/torch_client.sh against ddprun-store; it also passes
against torch's own server (bench/torch_store_server.py) of both, which is
how its expectations were checked.

Usage: torch_client.py HOST PORT
Exit 0 when every check passes; 1 with the failed check on stderr.
"""
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

HOST = sys.argv[1]
PORT = int(sys.argv[2])


def client(timeout_s=10):
    # world_size is left unset so the client does not join torch's own
    # worker count ("init/" key); the test controls every key it creates.
    return dist.TCPStore(HOST, PORT, is_master=False, timeout=timedelta(seconds=timeout_s))


def check(what, got, want):
    if got != want:
        print(f"FAIL {what}: got {got!r}, want {want!r}", file=sys.stderr)
        sys.exit(1)
    print(f"ok {what}")


def main():
    s = client()
    base = s.num_keys()  # keys the server may already hold (none expected)

    # set / get, including a binary value and one of 1 MiB.
    s.set("k1", "v1")
    check("get after set", s.get("k1"), b"v1")
    s.set("k1", "v1-again")
    check("set overwrites", s.get("k1"), b"v1-again")
    s.set("bin", b"\x00\xff\x00\x01")
    check("binary value", s.get("bin"), b"\x00\xff\x00\x01")
    big = bytes(range(256)) * 4096
    s.set("big", big)
    check("1 MiB value", s.get("big"), big)
    s.set("empty", b"")
    check("empty value", s.get("empty"), b"")

    # add: a missing key counts as 0; the value is stored as decimal text.
    check("add creates", s.add("cnt", 5), 5)
    check("add negative", s.add("cnt", -2), 3)
    check("add stores decimal text", s.get("cnt"), b"3")
    s.set("n", "10")
    check("add to a set value", s.add("n", 1), 11)
    check("add zero reads", s.add("n", 0), 11)

    # compare_set: create-if-missing, swap, mismatch.
    check("compare_set creates a missing key", s.compare_set("cas", "", "first"), b"first")
    check("compare_set swaps on match", s.compare_set("cas", "first", "second"), b"second")
    check("compare_set mismatch returns current", s.compare_set("cas", "nope", "third"), b"second")
    check("compare_set mismatch keeps value", s.get("cas"), b"second")
    # torch's server answers a compare_set on a missing key with a non-empty
    # expected value by echoing the expected value, and creates nothing.
    # (torch 1.13's Python binding has no check(), so absence is seen in
    # num_keys and in delete_key's answer.)
    before = s.num_keys()
    check("compare_set missing, non-empty expected", s.compare_set("cas-missing", "x", "y"), b"x")
    check("compare_set missing creates nothing", s.num_keys(), before)
    check("compare_set missing leaves key absent", s.delete_key("cas-missing"), False)

    # wait for keys that a second client sets later.
    def set_later():
        time.sleep(0.5)
        other = client()
        other.set("late1", "a")
        time.sleep(0.2)
        other.set("late2", "b")

    t = threading.Thread(target=set_later)
    t0 = time.monotonic()
    t.start()
    s.wait(["late1", "late2"])
    waited = time.monotonic() - t0
    t.join()
    check("wait returns after both keys are set", waited >= 0.6, True)
    check("wait for an existing key", s.wait(["k1"]), None)
    check("get waits for a key set later", get_set_later(s), b"later")

    # num_keys and delete_key.
    created = ["k1", "bin", "big", "empty", "cnt", "n", "cas", "late1", "late2", "gl"]
    check("num_keys", s.num_keys(), base + len(created))
    check("delete existing key", s.delete_key("k1"), True)
    check("delete missing key", s.delete_key("k1"), False)
    check("num_keys after delete", s.num_keys(), base + len(created) - 1)

    # A wait that times out raises, after about its timeout. It runs on its
    # own client because torch 1.13 leaves that connection with the
    # server's eventual answer unread.
    w = client()
    t0 = time.monotonic()
    try:
        w.wait(["never"], timedelta(seconds=1))
        raised = False
    except Exception as e:  # torch 1.13 raises RuntimeError
        raised = True
        print(f"   (wait timeout raised {type(e).__name__}: {str(e).splitlines()[0]})")
    took = time.monotonic() - t0
    check("wait with a timeout raises", raised, True)
    check("wait timeout took about 1 s", 0.9 <= took < 5, True)
    # The timed-out waiter goes away; setting its key afterwards must not
    # upset the server (it has a waiter on a closed connection).
    del w
    time.sleep(0.2)
    s.set("never", "now")
    check("server fine after a waiter left", s.get("never"), b"now")
    check("a new client still works", client().add("cnt", 1), 4)
    return 0


def get_set_later(s):
    def later():
        time.sleep(0.3)
        client().set("gl", "later")

    t = threading.Thread(target=later)
    t.start()
    v = s.get("gl")
    t.join()
    return v


if __name__ == "__main__":
    sys.exit(main())
