#!/usr/bin/env python3
"""Writes the seed corpus of the store parser's fuzz target to tests/fuzz/seeds/.

The seeds are committed; this script is kept so that they can be read,
changed and regenerated rather than edited as binary files. Each seed is the
target's mode byte (see fuzz_store_parse.c: bits 0-1 pick the protocol
generation, bits 2-3 the limits) followed by the bytes a client would send,
built from the byte-level rules in docs/protocol.md.

Run from the repository root: python3 tests/fuzz/make_seeds.py
"""
import os
import struct

# Mode bytes: generation in bits 0-1, default limits.
UNKNOWN, V1, V2, SERVER = 0, 1, 2, 3
SMALL_LIMITS = 1 << 2

VALIDATE_MAGIC = 0x3C85F7CE
EXT_MAGIC = 0x52504444  # "DDPR"

# Current generation (torch >= 2.x) wire codes.
V2_CODES = dict(VALIDATE=0, SET=1, COMPARE_SET=2, GET=3, ADD=4, CHECK=5, WAIT=6,
                GETNUMKEYS=7, DELETE_KEY=8, APPEND=9, MULTI_GET=10, MULTI_SET=11,
                CANCEL_WAIT=12, PING=13, QUEUE_PUSH=14, QUEUE_POP=15, QUEUE_LEN=16,
                LIST_KEYS=17, BARRIER=18)
# torch 1.13 wire codes.
V1_CODES = dict(SET=0, COMPARE_SET=1, GET=2, ADD=3, CHECK=4, WAIT=5, GETNUMKEYS=6,
                WATCH_KEY=7, DELETE_KEY=8)
# ddprun's extension: the same codes in both generations.
EXT_CODES = dict(HELLO=0x40, SET_OWNED=0x41, LEASE_GRANT=0x42, LEASE_RENEW=0x43,
                 LEASE_REVOKE=0x44, WAIT_ANY=0x45)


def u8(v):
    return struct.pack("<B", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def i64(v):
    return struct.pack("<q", v)


def s(data):
    """A string or byte vector: u64 length, then the bytes."""
    if isinstance(data, str):
        data = data.encode()
    return u64(len(data)) + data


def keys(*names):
    return u64(len(names)) + b"".join(s(k) for k in names)


def v2(op, *args):
    return u8(V2_CODES[op]) + b"".join(args)


def v1(op, *args):
    return u8(V1_CODES[op]) + b"".join(args)


def ext(op, *args):
    return u8(EXT_CODES[op]) + b"".join(args)


VALIDATE = v2("VALIDATE", u32(VALIDATE_MAGIC))
HELLO = ext("HELLO", u32(EXT_MAGIC), u32(1), s("secret"))

SEEDS = {
    # What a torch >= 2.x client sends first, then one SET.
    "v2_validate_ping_set": (V2, VALIDATE + v2("PING", u32(0x12345678))
                             + v2("SET", s("/init"), s("hello"))),
    # torch 1.13's store.set() and store.get() (get is WAIT then GET).
    "v1_set_get": (V1, v1("SET", s("/a"), s("1")) + v1("WAIT", keys("/a"))
                   + v1("GET", s("/a"))),
    "v2_wait_two_keys": (V2, v2("WAIT", keys("/rank0", "/rank1"))),
    "v1_check_two_keys": (V1, v1("CHECK", keys("/x", "/y"))),
    "v2_multi_set_get": (V2, v2("MULTI_SET", u64(2), s("k1"), s("v1"), s("k2"), s("v2"))
                         + v2("MULTI_GET", keys("k1", "k2"))),
    # The server's sequence: HELLO while the generation is unknown, then
    # VALIDATE decides it.
    "hello_then_v2": (SERVER, HELLO + VALIDATE + v2("GETNUMKEYS")),
    "hello_only": (UNKNOWN, HELLO),
    "v2_cas_add": (V2, v2("COMPARE_SET", s("/leader"), s(""), s("node-a"))
                   + v2("ADD", s("/count"), i64(-3)) + v2("DELETE_KEY", s("/count"))),
    "v2_queue": (V2, v2("QUEUE_PUSH", s("q"), s("job")) + v2("QUEUE_LEN", s("q"))
                 + v2("QUEUE_POP", s("q")) + v2("APPEND", s("log"), s("+"))
                 + v2("LIST_KEYS") + v2("CANCEL_WAIT")),
    "v2_barrier": (V2, v2("BARRIER", s("/barrier/0"), i64(4))),
    "v1_watch_key": (V1, v1("WATCH_KEY", s("/status")) + v1("GETNUMKEYS")),
    "ext_leases": (V2, ext("LEASE_GRANT", i64(5000)) + ext("SET_OWNED", s("/alive/0"), s("1"),
                                                              u64(1))
                   + ext("LEASE_RENEW", u64(1)) + ext("LEASE_REVOKE", u64(1))),
    "ext_wait_any": (V1, ext("WAIT_ANY", u64(2), u8(0), s("/done"), u8(1), s("/alive/3"))),
    # A key that is over the small limit: the parser must refuse it from
    # its length alone.
    "small_limits_long_key": (V2 | SMALL_LIMITS, v2("GET", s("k" * 17))),
}


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
    os.makedirs(out, exist_ok=True)
    for name, (mode, body) in sorted(SEEDS.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(u8(mode) + body)


if __name__ == "__main__":
    main()
