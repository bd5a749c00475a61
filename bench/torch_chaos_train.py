"""PyTorch's side of `make bench-chaos`: ddp-train's ResNet-20 trained with
DistributedDataParallel over gloo under torchrun, checkpointing the way
pytorch/examples' ddp-tutorial-series does: rank 0 saves the model and
optimizer with torch.save every --save-every steps, and every rank loads the
snapshot at start when there is one. Random batches (seeded by step and
rank). Rank 0 prints "done: N steps" at the end."""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "compat"))
from torch_resnet_grads import ResNet  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=32, help="per rank")
    ap.add_argument("--save-every", type=int, default=20)
    ap.add_argument("--snapshot", required=True, help="the checkpoint file")
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        print(f"workers' torch {torch.__version__}", flush=True)
    torch.manual_seed(0)
    net = DDP(ResNet("resnet20", 1, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    start = 0
    if os.path.exists(a.snapshot):
        state = torch.load(a.snapshot)
        net.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        if rank == 0:
            print(f"resuming from step {start}", flush=True)
    net.train()
    for step in range(start, a.steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(a.batch, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (a.batch,), generator=g)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()
        if rank == 0 and (step + 1) % a.save_every == 0:
            tmp = a.snapshot + ".tmp"
            torch.save({"step": step + 1, "model": net.module.state_dict(),
                        "opt": opt.state_dict()}, tmp)
            os.replace(tmp, a.snapshot)
    if rank == 0:
        print(f"done: {a.steps} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
