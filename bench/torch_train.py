"""PyTorch's side of `make bench-train`: the same ResNet as ddp-train
(tests/compat/torch_resnet_grads.py defines it) trained on CPU with SGD,
momentum and weight decay, on random batches of the given shape; prints
one key=value line with the images per second after warm-up and the peak
resident memory."""
import argparse
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "compat"))
from torch_resnet_grads import ResNet  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--shape", default="1x28x28")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    c, h, w = (int(v) for v in a.shape.split("x"))
    torch.manual_seed(0)
    net = ResNet(a.model, c, 10)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch, c, h, w)
    y = torch.randint(0, 10, (a.batch,))
    net.train()
    for step in range(a.steps + a.warmup):
        if step == a.warmup:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"impl=pytorch img_per_s={a.steps * a.batch / dt:.1f} peak_rss_mib={rss:.1f} "
          f"loss={loss.item():.4f}")


if __name__ == "__main__":
    main()
