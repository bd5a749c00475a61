"""A torchrun script that keeps its state with ddprun.snapshot (the
installed wheel's module): a small DDP model over gloo, a snapshot after
every step, resumed from the newest any node holds. --kill-at S: on the
first attempt, rank 1 kills itself with SIGKILL in step S. Rank 0 prints
the interpreter, where it resumed and the final weights' sum."""
import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddprun import snapshot


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--kill-at", type=int, default=-1)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state, last = snapshot.load()
    if state:
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        if rank == 0:
            print(f"resuming after step {last}", flush=True)
    if rank == 0:
        print(f"python {sys.executable}", flush=True)
    first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    for step in range(last + 1, args.steps):
        if step == args.kill_at and rank == 1 and first:
            os.kill(os.getpid(), signal.SIGKILL)
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(16, 8, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True) * 0.5).backward()
        opt.step()
        snapshot.save({"model": model.module.state_dict(), "opt": opt.state_dict()}, step)
    if rank == 0:
        w = torch.cat([p.detach().flatten() for p in model.parameters()])
        print(f"final weights {w.double().sum().item():.12f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
