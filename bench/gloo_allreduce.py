#!/usr/bin/python3
"""The peer of ddp-allreduce-bench: torch.distributed's all_reduce with the
gloo backend, measured the same way and printed in the same columns, so
that bench/allreduce_bench.sh can put the two side by side. One process per
rank, under a launcher that sets torchrun's environment:

    PYTHON_EXEC=/usr/bin/python3 build/bin/ddprun --standalone \
        --nproc-per-node 4 bench/gloo_allreduce.py --max-bytes 128M

For each size (doubling from --min-bytes to --max-bytes): fill known small
integers, all_reduce once and check the exact sum (exit 1 if wrong), then
--warmup untimed and --iters timed all_reduces of zeros (0: as many as fit
in about 0.25 s, 5 to 2000, decided by rank 0). With more ranks than
CPUs, each rank is bound to one CPU, as ddp-allreduce-bench does (--no-bind
to not). Rank 0 prints one row:
size_bytes time_us algbw_GBps busbw_GBps, the time being the mean over
ranks of each rank's mean, busbw = algbw * 2(n-1)/n as nccl-tests reports.
"""
import argparse
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def parse_size(s):
    mul = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = s.strip().lower().rstrip("b")
    if s and s[-1] in mul:
        return int(float(s[:-1]) * mul[s[-1]])
    return int(s)


def timed(buf, iters):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    return (time.perf_counter() - t0) / iters


def bench_size(nbytes, args, rank, world):
    count = nbytes // 4
    idx = torch.arange(count, dtype=torch.int64) % 13 + 1
    buf = (idx * (rank + 1)).to(torch.float32)
    dist.all_reduce(buf)
    want = (idx * (world * (world + 1) // 2)).to(torch.float32)
    bad = torch.tensor([float((buf != want).sum().item())])
    dist.all_reduce(bad)
    if bad.item() != 0:
        if rank == 0:
            print(f"gloo_allreduce: {int(bad.item())} wrong elements at {nbytes} bytes",
                  file=sys.stderr)
        return False
    buf.zero_()
    warm = timed(buf, args.warmup) if args.warmup else 1e-3
    iters = args.iters
    if not iters:
        t = torch.tensor([min(2000, max(5, int(0.25 / max(warm, 1e-6))))], dtype=torch.int32)
        dist.broadcast(t, src=0)
        iters = int(t.item())
    secs = timed(buf, iters)
    mean = torch.tensor([secs * 1e6], dtype=torch.float64)
    dist.all_reduce(mean)
    us = mean.item() / world
    if rank == 0:
        algbw = nbytes / (us * 1e-6) / 1e9
        print(f"{nbytes:12d} {us:12.2f} {algbw:12.3f} {algbw * 2 * (world - 1) / world:12.3f}",
              flush=True)
    return True


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--min-bytes", default="4K")
    p.add_argument("--max-bytes", default="128M")
    p.add_argument("--iters", type=int, default=0)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--no-bind", action="store_true",
                   help="never bind ranks to CPUs (by default, only with more ranks than CPUs)")
    args = p.parse_args()
    # Gloo picks an interface from the host name; on one host loopback is
    # what the processes share (and what ours uses too).
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    # The same binding policy as ddp-allreduce-bench: with more ranks on
    # this host than CPUs, rank r runs on CPU (local rank mod CPUs).
    cpus = sorted(os.sched_getaffinity(0))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not args.no_bind and int(os.environ.get("LOCAL_WORLD_SIZE", "1")) > len(cpus):
        os.sched_setaffinity(0, {cpus[local_rank % len(cpus)]})
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"# gloo_allreduce: torch {torch.__version__}, {world} ranks", file=sys.stderr)
        print(f"{'size_bytes':>12} {'time_us':>12} {'algbw_GBps':>12} {'busbw_GBps':>12}",
              flush=True)
    nbytes, ok = parse_size(args.min_bytes), True
    while ok and nbytes <= parse_size(args.max_bytes):
        ok = bench_size(nbytes, args, rank, world)
        nbytes *= 2
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
