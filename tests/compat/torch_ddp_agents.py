"""A real PyTorch DDP job for tests/compat/torch_ddp_agents.sh, run by ddprun.

init_process_group("gloo") through env:// (the agent's store, as torchrun's
workers use it), a small nn.Linear wrapped in DistributedDataParallel, three
SGD steps on fixed per-rank data, then checks: every rank holds the same
weights (all_gather), an all_reduce of a checksum of the weights equals
world x the local one, and the weights equal those of one process doing the
same steps on the averaged loss of every rank's data (what DDP computes).
Rank 0 prints the final weight sum.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS, LR = 3, 0.1


def data(rank):
    g = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)


def make_model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]), (rank, os.environ["RANK"])
    assert world == int(os.environ["WORLD_SIZE"]), (world, os.environ["WORLD_SIZE"])

    model = make_model()
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    x, y = data(rank)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()

    w = flat(model)
    gathered = [torch.empty_like(w) for _ in range(world)]
    dist.all_gather(gathered, w)
    for r, g in enumerate(gathered):
        assert torch.equal(g, w), f"rank {rank}: weights differ from rank {r}'s"
    checksum = w.sum().reshape(1).double()
    total = checksum.clone()
    dist.all_reduce(total)
    assert abs(total.item() - world * checksum.item()) < 1e-9, (total.item(), checksum.item())

    # The same steps in one process: DDP averages the ranks' gradients.
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=LR)
    batches = [data(r) for r in range(world)]
    for _ in range(STEPS):
        ref_opt.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(ref(bx), by) for bx, by in batches) / world
        loss.backward()
        ref_opt.step()
    err = (flat(ref) - w).abs().max().item()
    assert err < 1e-5, f"rank {rank}: DDP weights differ from the reference by {err}"

    dist.barrier()
    if rank == 0:
        print(f"final weight sum: {w.sum().item():.6f} (world {world}, max error vs reference {err:.2e})")
    print(f"rank {rank} of {world}: ok (store {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
          f"{', job store ' + os.environ['DDPRUN_JOB_STORE'] if 'DDPRUN_JOB_STORE' in os.environ else ''})",
          flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
