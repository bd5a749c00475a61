"""PyTorch's side of `make bench-gpu-restart`: a restartable training script
as PyTorch's users write one for torchrun (pytorch/examples'
ddp-tutorial-series, with the GPU settings of bench/torch_gpu_train.py):
init_process_group("nccl"), torchvision's ResNet-50 in DDP, channels_last,
bf16 autocast, cudnn.benchmark, SGD with momentum; every --save-every steps
rank 0 saves the model and optimizer with torch.save (to a file in memory,
/dev/shm, so the disk costs nothing), and every rank loads it at start when
there is one. One batch kept on the GPU. Prints "step N" after each step
(flushed), so the bench sees the first step after a restart as it happens."""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--shape", default="3x224x224")
    ap.add_argument("--save-every", type=int, default=10)
    ap.add_argument("--snapshot", required=True)
    a = ap.parse_args()
    import torchvision

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.backends.cudnn.benchmark = True
    c, h, w = (int(v) for v in a.shape.split("x"))
    torch.manual_seed(0)
    net = torchvision.models.resnet50(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    start = 0
    if os.path.exists(a.snapshot):
        state = torch.load(a.snapshot, map_location=f"cuda:{local}")
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        if rank == 0:
            print(f"resuming from step {start}", flush=True)
    net = DDP(net, device_ids=[local])
    x = torch.randn(a.batch, c, h, w, device="cuda").contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device="cuda")
    for step in range(start + 1, a.steps + 1):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        loss_v = loss.item()  # the step is done on the GPU
        if rank == 0:
            print(f"step {step} loss {loss_v:.4f}", flush=True)
            if step % a.save_every == 0:
                tmp = a.snapshot + ".tmp"
                torch.save({"model": net.module.state_dict(), "opt": opt.state_dict(),
                            "step": step}, tmp)
                os.replace(tmp, a.snapshot)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
