#!/usr/bin/python3
"""PyTorch's own TCPStore server, run alone: the peer that the store
benchmark (bench/store_bench.sh) compares ddprun-store with, and a reference
server for checking that the compatibility tests assert what torch does.

Usage: torch_store_server.py --host H --port P

Port 0 picks a free port (torch 1.13 binds port 0 itself and reports the
port it got in `store.port`). Prints `listening on HOST:PORT` on stderr once
the server accepts connections, then serves until it is killed (SIGTERM or
SIGINT end it).
"""
import argparse
import datetime
import signal
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    try:
        import torch.distributed as dist
    except ImportError as e:
        print(f"torch_store_server: cannot import torch.distributed: {e}", file=sys.stderr)
        return 2

    # world_size=None with wait_for_workers=False: the master does not wait
    # for (or count) workers, it just serves, which is what a benchmark peer
    # needs. The store object owns the server thread; keeping it referenced
    # keeps the server alive.
    store = dist.TCPStore(
        args.host,
        args.port,
        None,
        True,
        datetime.timedelta(seconds=300),
        wait_for_workers=False,
    )
    print(f"listening on {args.host}:{store.port}", file=sys.stderr, flush=True)

    # Python's default SIGTERM action kills the process without running
    # Python code; turning it into SystemExit lets the store shut down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    del store
    return 0


if __name__ == "__main__":
    sys.exit(main())
