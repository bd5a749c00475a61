#!/usr/bin/python3
"""Clients that hold the agent's health port shut, against a running agent
(tests/integration/agent_health_slow_clients.sh starts it): many
connections that each send one byte a second and never finish their
request, a request head larger than the server takes, and a client that
never sends anything. GET /health must keep answering at once for everyone
else.

Usage: agent_health_slow_clients.py PORT AGENT_PID [SLOW_CLIENTS [SECONDS]]
Prints what it measured; exit 0 when every check passes, 1 with the failed
check on stderr."""
import socket
import sys
import threading
import time

HOST = "127.0.0.1"
PORT, PID = int(sys.argv[1]), int(sys.argv[2])
SLOW = int(sys.argv[3]) if len(sys.argv) > 3 else 300
SECONDS = float(sys.argv[4]) if len(sys.argv) > 4 else 8.0
ANSWER_WITHIN = 1.0  # seconds a GET /health may take while the slow clients hold on
DEADLINE = 5.0  # the server's, from accept to the end of the request head


def fail(msg):
    print(f"FAIL {msg}", file=sys.stderr)
    sys.exit(1)


def rss_kib():
    for line in open(f"/proc/{PID}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    fail("no VmRSS for the agent")


def read_all(c, limit):
    """Everything the server sends until it closes, within limit seconds;
    raises socket.timeout past it."""
    c.settimeout(limit)
    out = b""
    while True:
        try:
            chunk = c.recv(65536)
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk


def request(raw, limit):
    """Sends raw on a new connection; (seconds taken, reply) or (None, why)."""
    t0 = time.monotonic()
    try:
        c = socket.create_connection((HOST, PORT), timeout=limit)
        with c:
            c.sendall(raw)
            reply = read_all(c, max(0.01, limit - (time.monotonic() - t0)))
    except OSError as e:
        return None, f"{type(e).__name__}: {e}"
    return time.monotonic() - t0, reply


def status_of(reply):
    first = reply.split(b"\r\n", 1)[0].split()
    return int(first[1]) if len(first) >= 2 and first[0].startswith(b"HTTP/1.") else None


class SlowClients:
    """SLOW connections, each sending one byte of an endless header every
    second; one the server closes is opened again a second later, as an
    attacker would."""

    def __init__(self, n):
        self.socks = [None] * n
        self.closed_by_server = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open_one(self, i):
        try:
            c = socket.create_connection((HOST, PORT), timeout=1)
            c.setblocking(False)
            c.send(b"GET /health HTTP/1.1\r\nX-Slow: ")
            self.socks[i] = c
        except OSError:
            self.socks[i] = None

    def tick(self, i):
        c = self.socks[i]
        if c is None:
            return self.open_one(i)
        try:
            if c.recv(4096) == b"":
                raise ConnectionResetError
        except BlockingIOError:
            pass
        except OSError:
            self.closed_by_server += 1
            c.close()
            self.socks[i] = None
            return
        try:
            c.send(b"a")
        except BlockingIOError:
            pass
        except OSError:
            self.closed_by_server += 1
            c.close()
            self.socks[i] = None

    def run(self):
        while not self.stopping.is_set():
            t0 = time.monotonic()
            for i in range(len(self.socks)):
                if self.stopping.is_set():
                    break
                self.tick(i)
            self.stopping.wait(max(0.0, 1.0 - (time.monotonic() - t0)))

    def open_now(self):
        return sum(c is not None for c in self.socks)

    def stop(self):
        self.stopping.set()
        self.thread.join()
        for c in self.socks:
            if c is not None:
                c.close()


def check_under_slow_clients():
    rss0 = rss_kib()
    slow = SlowClients(SLOW)
    for i in range(SLOW):
        slow.open_one(i)
    slow.thread.start()
    times, end = [], time.monotonic() + SECONDS
    try:
        while time.monotonic() < end:
            took, reply = request(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 3 * ANSWER_WITHIN)
            if took is None or status_of(reply) not in (200, 503):
                fail(f"GET /health with {slow.open_now()} slow clients connected got no "
                     f"answer: {reply!r:.200} after {len(times)} answered")
            times.append(took)
            if took > ANSWER_WITHIN:
                fail(f"GET /health with {slow.open_now()} slow clients connected took "
                     f"{took:.2f} s (more than {ANSWER_WITHIN} s)")
            time.sleep(0.2)
        rss1, held = rss_kib(), slow.open_now()
    finally:
        slow.stop()
    times.sort()
    print(f"{len(times)} GET /health under {SLOW} slow clients ({held} connected at the end, "
          f"{slow.closed_by_server} closed by the server): median {times[len(times) // 2] * 1000:.1f} ms, "
          f"max {times[-1] * 1000:.1f} ms; agent RSS {rss0} KiB before, {rss1} KiB during")


def check_head_too_large():
    raw = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n"
    took, reply = request(raw, 3.0)
    if took is None:
        fail(f"a 20 kB request head: {reply}")
    if status_of(reply) not in (400, 431):
        fail(f"a 20 kB request head got {reply[:80]!r}, expected 431 or 400 and the connection closed")
    line = reply.split(b"\r\n", 1)[0].decode()
    print(f"a 20 kB request head: {line}, then closed")


def check_silent_client():
    t0 = time.monotonic()
    c = socket.create_connection((HOST, PORT), timeout=1)
    with c:
        try:
            read_all(c, DEADLINE + 3)
        except socket.timeout:
            fail(f"a client that sent nothing was still connected after {DEADLINE + 3:.0f} s")
    took = time.monotonic() - t0
    if took < DEADLINE - 1:
        fail(f"a client that sent nothing was closed after {took:.1f} s, before the deadline")
    print(f"a client that sent nothing: closed after {took:.1f} s")


def check_head_and_http10():
    took, reply = request(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n", 3.0)
    if took is None or status_of(reply) not in (200, 503):
        fail(f"HEAD /health: {reply!r:.200}")
    head, _, body = reply.partition(b"\r\n\r\n")
    if body or b"\r\ncontent-length: " not in head.lower():
        fail(f"HEAD /health must have a Content-Length and no body: {reply!r:.300}")
    took, reply = request(b"GET /health HTTP/1.0\r\n\r\n", 3.0)
    if took is None or status_of(reply) not in (200, 503) or b'"status"' not in reply:
        fail(f"GET /health over HTTP/1.0: {reply!r:.200}")


check_head_and_http10()
check_under_slow_clients()
check_head_too_large()
check_silent_client()
