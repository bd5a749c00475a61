#!/usr/bin/python3
"""Misbehaving clients against ddprun-store, spoken in raw bytes (see
docs/protocol.md): the server must drop each bad client at once, log one
line naming it, and keep serving everyone else. Run by
tests/integration/store_bad_input.sh, which starts the servers.

Usage:
  store_bad_input.py main HOST PORT STDERR_FILE      cases (a) to (e), (g)
  store_bad_input.py maxconns HOST PORT STDERR_FILE  case (f), server run with --max-conns 5
Exit 0 when every check passes; 1 with the failed check on stderr.
"""
import re
import socket
import struct
import sys
import time

VALIDATE_MAGIC = 0x3C85F7CE
# Wire codes: generation 1 is torch 1.13's, generation 2 torch >= 2.x's.
V1_SET, V1_GET, V1_ADD, V1_CHECK = 0, 2, 3, 4
V2_VALIDATE, V2_SET, V2_GET, V2_ADD, V2_PING = 0, 1, 3, 4, 13

HOST = PORT = STDERR = None
dropped = []  # (case, client address as the server logs it)
torch21 = []  # addresses whose log line must say "a torch 2.1 client?"


def u64(n):
    return struct.pack("<Q", n)


def s(b):
    """A length-prefixed string or byte vector."""
    b = b.encode() if isinstance(b, str) else b
    return u64(len(b)) + b


class Closed(Exception):
    """The server closed a connection that was expected to stay open."""


def fail(msg):
    print(f"FAIL {msg}", file=sys.stderr)
    sys.exit(1)


def ok(msg):
    print(f"ok {msg}")


def connect():
    family = socket.AF_INET6 if ":" in HOST else socket.AF_INET
    c = socket.socket(family, socket.SOCK_STREAM)
    c.settimeout(5)
    c.connect((HOST, PORT))
    return c


def addr_of(c):
    """The client's address in the form the server's log lines use."""
    host, port = c.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def recv_exact(c, n):
    out = b""
    while len(out) < n:
        chunk = c.recv(n - len(out))
        if not chunk:
            raise Closed(f"server closed the connection after {len(out)} of {n} reply bytes")
        out += chunk
    return out


def is_closed(c, within=2.0):
    """True if the server closes the connection within `within` seconds
    without sending anything."""
    c.settimeout(within)
    try:
        data = c.recv(64)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return data == b""


def v2_handshake(c):
    c.sendall(bytes([V2_VALIDATE]) + struct.pack("<I", VALIDATE_MAGIC))
    c.sendall(bytes([V2_PING]) + struct.pack("<I", 0x1234ABCD))
    got = struct.unpack("<I", recv_exact(c, 4))[0]
    if got != 0x1234ABCD:
        fail(f"PING echoed {got:#x}, want 0x1234abcd")


def v1_add(c, key, n):
    c.sendall(bytes([V1_ADD]) + s(key) + struct.pack("<q", n))
    return struct.unpack("<q", recv_exact(c, 8))[0]


def v1_get(c, key):
    c.sendall(bytes([V1_GET]) + s(key))
    n = struct.unpack("<Q", recv_exact(c, 8))[0]
    return recv_exact(c, n)


def v1_check(c, keys):
    c.sendall(bytes([V1_CHECK]) + u64(len(keys)) + b"".join(s(k) for k in keys))
    return recv_exact(c, 1)[0] == 0


def expect_dropped(case, c, payload):
    addr = addr_of(c)
    c.sendall(payload)
    if not is_closed(c):
        fail(f"{case}: the server kept the connection open")
    c.close()
    dropped.append((case, addr))
    ok(f"{case}: dropped")


def check_logs():
    """One log line per dropped client, naming its address."""
    time.sleep(0.3)  # the server writes its line as it drops; allow for scheduling
    lines = open(STDERR, errors="replace").read().splitlines()
    for case, addr in dropped:
        pat = re.compile(re.escape(addr) + r"(?!\d)")
        hits = [line for line in lines if pat.search(line)]
        if len(hits) != 1:
            fail(f"{case}: want one log line naming {addr}, found {len(hits)}: {hits}")
        ok(f"{case}: logged: {hits[0]}")
        if addr in torch21 and "a torch 2.1 client?" not in hits[0]:
            fail(f"{case}: the log line does not mention torch 2.1")


def case_main():
    # (a) an unknown query type after a valid handshake.
    c = connect()
    v2_handshake(c)
    expect_dropped("(a) unknown query type 0xEE", c, b"\xee")

    # (b) length prefixes far beyond the limits: dropped as soon as the
    # length is read, without waiting for (or buffering) the bytes.
    expect_dropped("(b) v1 SET key length 2^40", connect(), bytes([V1_SET]) + u64(1 << 40))
    c = connect()
    v2_handshake(c)
    expect_dropped("(b) v2 SET key length 2^40", c, bytes([V2_SET]) + u64(1 << 40))
    expect_dropped("(b) v1 SET value length 2^40", connect(),
                   bytes([V1_SET]) + s("k") + u64(1 << 40))

    # (c) a valid SET sent one byte at a time is still one SET.
    c = connect()
    frame = bytes([V1_SET]) + s("slow/key") + s(b"drip\x00drop")
    for i in range(len(frame)):
        c.sendall(frame[i:i + 1])
        time.sleep(0.005)
    # A round trip on the same connection: replies stay in order, so the
    # SET has been applied once CHECK answers.
    if not v1_check(c, ["slow/key"]):
        fail("(c) the byte-at-a-time SET did not create its key")
    other = connect()
    got = v1_get(other, "slow/key")
    if got != b"drip\x00drop":
        fail(f"(c) a second client read {got!r}, want b'drip\\x00drop'")
    c.close()
    other.close()
    ok("(c) byte-at-a-time SET applied and visible to another client")

    # (d) clients that vanish mid-request: a clean close and a reset.
    c = connect()
    c.sendall(bytes([V1_SET]) + u64(10) + b"abc")
    c.close()
    c = connect()
    c.sendall(bytes([V1_ADD]) + s("half") + b"\x01\x00")
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()  # SO_LINGER 0: the kernel sends RST
    time.sleep(0.2)
    ok("(d) half-frame clients gone (close and reset)")

    # (e) a handshake with the wrong magic number. Byte 0 is also torch
    # 1.13's SET, so the bytes after it read as a 0xDEADBEEF-byte key;
    # either way the server must hang up.
    expect_dropped("(e) wrong VALIDATE magic", connect(),
                   bytes([V2_VALIDATE]) + struct.pack("<I", 0xDEADBEEF) + b"\x00" * 4)

    # (g) torch 2.1's MULTI_GET (0x09), which torch 1.13 does not have: the
    # log line says what probably connected (a layout that is not served).
    c = connect()
    expect_dropped("(g) torch 2.1's MULTI_GET", c,
                   bytes([9]) + u64(1) + s("/k"))
    torch21.append(dropped[-1][1])

    # Everyone else is still served: both generations, fresh connections.
    c = connect()
    v2_handshake(c)
    c.sendall(bytes([V2_ADD]) + s("fresh/count") + struct.pack("<q", 7))
    got = struct.unpack("<q", recv_exact(c, 8))[0]
    if got != 7:
        fail(f"fresh v2 client: ADD returned {got}, want 7")
    c.close()
    c = connect()
    if v1_add(c, "fresh/count", 1) != 8 or v1_get(c, "slow/key") != b"drip\x00drop":
        fail("fresh v1 client: wrong ADD or GET result")
    c.close()
    ok("fresh well-behaved clients work after all of the above")
    check_logs()


def case_maxconns():
    # (f) five connections are the limit; the sixth is accepted and dropped.
    conns = [connect() for _ in range(5)]
    for i, c in enumerate(conns):
        v1_add(c, "mc/count", 1)
    sixth = connect()
    addr = addr_of(sixth)
    if not is_closed(sixth):
        fail("(f) the 6th connection was kept open with --max-conns 5")
    sixth.close()
    dropped.append(("(f) 6th connection over --max-conns 5", addr))
    ok("(f) 6th connection closed")
    for c in conns:
        v1_add(c, "mc/count", 1)
    if v1_get(conns[0], "mc/count") != b"10":
        fail("(f) the first five connections did not all keep working")
    ok("(f) the first five still work")
    # Closing one makes room for a new one (the server may take a moment
    # to see the close, so retry briefly).
    conns.pop().close()
    deadline = time.monotonic() + 3
    while True:
        c = connect()
        try:
            if v1_add(c, "mc/count", 1) == 11:
                break
        except (Closed, ConnectionResetError):
            if time.monotonic() > deadline:
                fail("(f) no room for a new connection after one of five closed")
            time.sleep(0.1)
        finally:
            c.close()
    ok("(f) a closed slot is reused")
    check_logs()


def main():
    global HOST, PORT, STDERR
    mode, HOST, PORT, STDERR = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    try:
        {"main": case_main, "maxconns": case_maxconns}[mode]()
    except (Closed, OSError) as e:
        fail(f"a well-behaved connection failed: {e!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
