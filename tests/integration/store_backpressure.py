#!/usr/bin/python3
"""Clients that never read their replies, hoard watches or stop in the
middle of a request, against ddprun-store (tests/integration/
store_backpressure.sh starts it): the server's memory stays bounded and
everyone else keeps being served.

Usage: store_backpressure.py HOST PORT SERVER_PID STDERR_FILE
Exit 0 when every check passes; 1 with the failed check on stderr."""
import socket
import struct
import sys
import time

VALIDATE_MAGIC = 0x3C85F7CE
V2_VALIDATE, V2_SET, V2_GET, V2_PING = 0, 1, 3, 13
V1_SET, V1_WATCH = 0, 7
HOST, PORT, PID, STDERR = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]


def fail(msg):
    print(f"FAIL {msg}", file=sys.stderr)
    sys.exit(1)


def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def rss_mib():
    for line in open(f"/proc/{PID}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    fail("no VmRSS for the server")


def recv_exact(c, n):
    out = b""
    while len(out) < n:
        chunk = c.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def current():
    """A connection speaking the current protocol, validated."""
    c = socket.create_connection((HOST, PORT), timeout=10)
    c.sendall(bytes([V2_VALIDATE]) + struct.pack("<I", VALIDATE_MAGIC))
    return c


def ping_ms(c):
    t0 = time.monotonic()
    c.sendall(bytes([V2_PING]) + struct.pack("<I", 77))
    if struct.unpack("<I", recv_exact(c, 4))[0] != 77:
        fail("PING echoed something else")
    return (time.monotonic() - t0) * 1000


def dropped(c, seconds):
    """Whether the server closes c within seconds."""
    c.settimeout(seconds)
    try:
        while c.recv(65536):
            pass
        return True
    except socket.timeout:
        return False
    except ConnectionError:
        return True


def log_has(text):
    return text in open(STDERR).read()


# 1. Pipelined GETs of a 1 MiB value, never read: 4,000 of them (56 KB of
# requests) would be 4 GiB of replies; the server reads no more of them
# than its budget allows and stays small. Another client is unaffected.
base = rss_mib()
setter = current()
setter.sendall(bytes([V2_SET]) + s("big") + s(b"x" * (1 << 20)))
ping_ms(setter)  # answered after the SET: the value is there before anyone GETs it
other = current()
ping_ms(other)
hog = current()
hog.sendall((bytes([V2_GET]) + s("big")) * 4000)
worst = 0.0
for _ in range(20):
    time.sleep(0.1)
    worst = max(worst, ping_ms(other))
grown = rss_mib() - base
print(f"never-reading client: server grew by {grown:.0f} MiB (before the fix: GiBs); "
      f"another client's PING took at most {worst:.1f} ms")
if grown > 64:
    fail(f"the server grew by {grown:.0f} MiB under a client that does not read")
if worst > 1000:
    fail(f"another client waited {worst:.0f} ms for a PING")
# The hog is still served, at the pace it reads: read some replies.
hog.settimeout(10)
got = 0
while got < 8 << 20:
    got += len(hog.recv(1 << 20))
hog.close()
print(f"the never-reading client got its replies as it read ({got >> 20} MiB read)")

# 2. torch 1.13's WATCH_KEY: more than 1,024 on one connection drops it.
w = socket.create_connection((HOST, PORT), timeout=10)
w.sendall((bytes([V1_WATCH]) + s("/watched")) * 1100)
if not dropped(w, 10):
    fail("1,100 watches on one connection were accepted")
if not log_has("more than 1024 WATCH_KEY registrations on one connection"):
    fail("no log line names the watch limit")
print("1,100 watches on one connection: dropped, with a log line")

# 3. Half a request, then nothing: dropped after the request timeout (the
# server runs with --request-timeout 2).
p = current()
p.sendall(bytes([V2_SET]) + s("half") + struct.pack("<Q", 1 << 20) + b"y" * 1000)
if not dropped(p, 10):
    fail("a half-sent request was held for 10 s (the timeout is 2 s)")
if not log_has("did not finish it in 2 s"):
    fail("no log line names the request timeout")
print("half a request and no more: dropped after the timeout")
print(f"PING still answered in {ping_ms(other):.1f} ms")
