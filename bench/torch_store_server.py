#!/usr/bin/python3
"""PyTorch's own TCPStore server, run alone: the peer that the store
benchmark (bench/store_bench.sh) compares ddprun-store with, and a reference
server for checking that the compatibility tests assert what torch does.

Usage: torch_store_server.py --host H --port P [--ipv4-fd]

Port 0 picks a free port (torch 1.13 binds port 0 itself and reports the
port it got in `store.port`). Prints `listening on HOST:PORT` on stderr once
the server accepts connections, then serves until it is killed (SIGTERM or
SIGINT end it).

--ipv4-fd (torch 2.x only): binds an IPv4 socket to HOST:PORT here and hands
it to the server (TCPStore's master_listen_fd), instead of letting torch
listen on [::]. torch's server looks up every client's host name
(getnameinfo, in its event loop); on [::] a client of 127.0.0.1 arrives as
::ffff:127.0.0.1, which /etc/hosts does not name, so each connection costs a
DNS query, and a resolver that drops one stalls the whole server for its
timeout (5 s). On an IPv4 socket 127.0.0.1 is found in /etc/hosts
(bench/bootstrap_bench.sh uses it).
"""
import argparse
import datetime
import signal
import socket
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ipv4-fd", action="store_true",
                    help="serve on an IPv4 socket bound here (torch 2.x)")
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
    extra = {}
    port = args.port
    if args.ipv4_fd:
        # Kept referenced (and open) for as long as the server runs.
        listen_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listen_sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listen_sock.bind((args.host, args.port))
        port = listen_sock.getsockname()[1]
        extra["master_listen_fd"] = listen_sock.fileno()
    store = dist.TCPStore(
        args.host,
        port,
        None,
        True,
        datetime.timedelta(seconds=300),
        wait_for_workers=False,
        **extra,
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
