"""Compares the tensors of two ddp-train checkpoints (or the newest valid
one in each of two directories):

    ckpt_compare.py A B [--tensor params] [--rtol 1e-4] [--exact]

Prints the largest difference relative to the largest magnitude of each
tensor and exits 0 if within --rtol (or bit-identical with --exact)."""
import argparse
import glob
import json
import os
import struct
import sys
import zlib

import numpy as np


def read(path):
    """The tensors of one checkpoint file (format: docs/checkpoint.md)."""
    b = open(path, "rb").read()
    if b[:8] != b"DDPCKPT\0" or b[-8:] != b"DDPCKEND":
        raise ValueError(f"{path}: not a complete ddp-train checkpoint")
    _, _, hlen, n, _ = struct.unpack_from("<IIQII", b, 8)
    header = json.loads(b[32:32 + hlen])
    off, tensors = 36 + hlen, {}
    for _ in range(n):
        (name_len,) = struct.unpack_from("<H", b, off)
        name = b[off + 2:off + 2 + name_len].decode()
        _, _, nbytes, crc, _ = struct.unpack_from("<BBQII", b, off + 2 + name_len)
        off += 20 + name_len
        off += (64 - off % 64) % 64
        data = b[off:off + nbytes]
        if zlib.crc32(data) != crc:
            raise ValueError(f"{path}: tensor {name} fails its CRC")
        tensors[name] = np.frombuffer(data, "<f4")
        off += nbytes
    return header, tensors


def reldiff(a, b):
    """The largest difference relative to b's largest magnitude."""
    if a.shape != b.shape:
        return np.inf
    x, y = a.astype(np.float64), b.astype(np.float64)
    return np.abs(x - y).max() / max(np.abs(y).max(), 1e-30)


def newest(path):
    if os.path.isfile(path):
        return path
    files = sorted(glob.glob(os.path.join(path, "ckpt-*.ddpt")))
    if not files:
        raise ValueError(f"{path}: no checkpoints")
    return files[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tensor", action="append")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--spread", nargs=2, metavar=("C", "D"))
    ap.add_argument("--factor", type=float, default=4.0)
    args = ap.parse_args()
    (ha, ta), (hb, tb) = read(newest(args.a)), read(newest(args.b))
    spread = None
    if args.spread:
        (_, tc), (_, td) = read(newest(args.spread[0])), read(newest(args.spread[1]))
        spread = {k: reldiff(tc[k], td[k]) for k in tc}
    ok = ha["global_step"] == hb["global_step"]
    print(f"steps: {ha['global_step']} and {hb['global_step']}")
    for name in args.tensor or ["params", "buffers", "momentum"]:
        same = ta[name].shape == tb[name].shape and np.array_equal(ta[name], tb[name])
        rel = reldiff(ta[name], tb[name])
        tol = args.rtol
        if spread is not None:
            tol = max(args.rtol, args.factor * spread[name])
        good = same if args.exact else rel <= tol
        ok = ok and good
        within = "" if args.exact else f" (tolerance {tol:.3e}" + (
            f": {args.factor:g} x the spread {spread[name]:.3e})" if spread is not None else ")")
        print(f"{name}: {'identical' if same else f'largest relative difference {rel:.3e}'}"
              f"{within} -> {'ok' if good else 'DIFFERENT'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
