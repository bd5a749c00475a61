"""PyTorch's side of `make bench-ddp`: the same ResNet as ddp-train
(tests/compat/torch_resnet_grads.py) trained data-parallel on CPUs with
DistributedDataParallel over gloo, one process per rank (started by a
launcher that sets torchrun's environment), SGD with momentum and weight
decay, on random batches. Rank 0 prints one key=value line with the
images per second over all ranks after warm-up."""
import argparse
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
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--shape", default="1x28x28")
    ap.add_argument("--batch", type=int, default=64, help="per rank")
    ap.add_argument("--threads", type=int, default=1, help="per rank")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    c, h, w = (int(v) for v in a.shape.split("x"))
    torch.manual_seed(0)
    net = DDP(ResNet(a.model, c, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    torch.manual_seed(1 + rank)
    x = torch.randn(a.batch, c, h, w)
    y = torch.randint(0, 10, (a.batch,))
    net.train()
    for step in range(a.steps + a.warmup):
        if step == a.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        print(f"impl=pytorch-ddp img_per_s={a.steps * a.batch * world / dt:.1f} "
              f"loss={loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
