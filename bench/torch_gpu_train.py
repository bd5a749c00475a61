"""PyTorch's side of `make bench-gpu`: eager training on one GPU with SGD
(momentum, weight decay) on random batches, channels_last, fp32/tf32 or
autocast bf16; prints one key=value line with the images per second after
warm-up (timed between two device synchronisations).

ResNet-50 is torchvision's when torchvision is importable (the issue's
peer); CIFAR-style ResNet-20 is the same definition ddp-train's
compatibility test uses (tests/compat/torch_resnet_grads.py)."""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "compat"))
from torch_resnet_grads import ResNet  # noqa: E402


def build(name, c, classes):
    if name == "resnet50":
        try:
            import torchvision
            return torchvision.models.resnet50(num_classes=classes), "torchvision"
        except ImportError:
            pass
    return ResNet(name, c, classes), "tests/compat"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--shape", default="3x224x224")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="bf16")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_gpu_train: no CUDA device visible to torch")
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.benchmark = True
    c, h, w = (int(v) for v in a.shape.split("x"))
    torch.manual_seed(0)
    net, origin = build(a.model, c, 10 if a.model != "resnet50" else 1000)
    net = net.cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch, c, h, w, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (a.batch,), device="cuda")
    net.train()
    for step in range(a.steps + a.warmup):
        if step == a.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"impl=pytorch model={a.model} origin={origin} precision={a.precision} "
          f"img_per_s={a.steps * a.batch / dt:.1f} loss={loss.item():.4f} "
          f"gpu={torch.cuda.get_device_name(0).replace(' ', '_')}")


if __name__ == "__main__":
    main()
