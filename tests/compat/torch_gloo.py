#!/usr/bin/python3
"""One rank of a two-process torch.distributed job (gloo backend) whose
env:// rendezvous goes through an external store: tests/compat/torch_gloo.sh
starts two of these with MASTER_ADDR/MASTER_PORT pointing at ddprun-store
and TORCHELASTIC_USE_AGENT_STORE=True, which is what torchrun's agent sets;
torch 1.13 then makes every rank, rank 0 included, a TCPStore client
(torch/distributed/rendezvous.py, _create_c10d_store) instead of having
rank 0 host the server.

Checks an all_reduce, a broadcast and a barrier. Exit 0 on success.
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank != int(os.environ["RANK"]) or world != int(os.environ["WORLD_SIZE"]):
        print(f"rank/world mismatch: {rank}/{world}", file=sys.stderr)
        return 1

    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    want = world * (world + 1) / 2
    if not torch.equal(t, torch.full((4,), want)):
        print(f"rank {rank}: all_reduce gave {t.tolist()}, want {want}", file=sys.stderr)
        return 1

    b = torch.tensor([42.0 if rank == 0 else -1.0])
    dist.broadcast(b, src=0)
    if b.item() != 42.0:
        print(f"rank {rank}: broadcast gave {b.item()}, want 42", file=sys.stderr)
        return 1

    dist.barrier()
    print(f"rank {rank}: all_reduce={t[0].item()} broadcast={b.item()} barrier ok")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
