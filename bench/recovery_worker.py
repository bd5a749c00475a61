"""torchrun's side of `make bench-recovery`: the same ResNet-20 as ddp-train
(tests/compat/torch_resnet_grads.py), data-parallel over gloo on random
3x16x16 batches of 8 per rank. Rank 0 prints one line per step,
"step N start MS", MS being when this process started (ms since the
epoch), so the benchmark sees when a group started after a host loss
takes its first step."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "compat"))
from torch_resnet_grads import ResNet  # noqa: E402


def main():
    start_ms = int(time.time() * 1000)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = DDP(ResNet("resnet20", 3, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(1 + rank)
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    for step in range(1, 100000):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
        if rank == 0:
            print(f"step {step} start {start_ms}", flush=True)


if __name__ == "__main__":
    main()
