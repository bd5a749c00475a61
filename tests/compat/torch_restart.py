"""The smallest fault-tolerant PyTorch script, for tests/compat/torch_restart.sh:
every rank calls init_process_group("gloo") and all-reduces its rank + 1;
on every attempt before --succeed-at (TORCHELASTIC_RESTART_COUNT) rank 0
exits 1 once the all-reduce is done and the others wait to be stopped, so
the group restarts; on that attempt every rank also passes a barrier and
exits 0. Each rank prints "attempt A: rank R of W: all-reduce ok" when its
all-reduce gave the right sum, so the test can check that every round's
workers met (torch 2.x's workers read whatever an earlier round left in
the store under the same keys: a round that met stale addresses fails or
hangs here)."""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--succeed-at", type=int, required=True)
    a = ap.parse_args()
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    if t.item() != world * (world + 1) / 2:
        sys.exit(f"attempt {attempt}: rank {rank}: all-reduce gave {t.item()}")
    print(f"attempt {attempt}: rank {rank} of {world}: all-reduce ok", flush=True)
    if attempt < a.succeed_at:
        if rank == 0:
            sys.exit(1)
        time.sleep(120)  # stopped by the agent when rank 0's failure ends the round
        sys.exit(2)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
