"""PyTorch's side of `make bench-gpu`: training on one GPU with SGD
(momentum, weight decay), channels_last, as PyTorch's users run it: TF32
allowed for convolutions (PyTorch's default) and, with --precision tf32,
for matrix products too; bf16 under autocast; cudnn.benchmark on; eager, or
with --compile through torch.compile. Prints one key=value line with the
images per second after warm-up (timed between two device
synchronisations).

Feeding (--feed), the same way ddp-train is fed in the same bench:
  host    each step's batch comes from host memory: a few pinned batches
          made before timing, copied to the GPU with non_blocking=True
          (what a DataLoader with pin_memory=True hands the step); the
          default
  device  one batch made on the GPU and used at every step
  folder  torchvision's ImageFolder over --data-dir with the reference
          training transforms (RandomResizedCrop, flip, ToTensor,
          Normalize; PIL decoding) through a DataLoader of --workers
          processes, pin_memory=True: what a user's script does

ResNet-50 is torchvision's when torchvision is importable; CIFAR-style
ResNet-20 is the same definition ddp-train's compatibility test uses
(tests/compat/torch_resnet_grads.py)."""
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


def train_folder(a, net, step_fn, opt, origin, size):
    import torchvision
    from torchvision import transforms
    tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = torchvision.datasets.ImageFolder(os.path.join(a.data_dir, "train"), tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, drop_last=True,
                                     num_workers=a.workers, pin_memory=True,
                                     persistent_workers=a.workers > 0)
    net.train()
    t0, step = None, 0
    while step < a.steps + a.warmup:
        for x, y in dl:
            if step == a.warmup:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            if step == a.steps + a.warmup:
                break
            x = x.to("cuda", non_blocking=True).contiguous(memory_format=torch.channels_last)
            y = y.to("cuda", non_blocking=True)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                loss = F.cross_entropy(step_fn(x), y)
            loss.backward()
            opt.step()
            step += 1
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"impl=pytorch model={a.model} origin={origin} precision={a.precision} "
          f"compile={int(a.compile)} feed=folder workers={a.workers} "
          f"img_per_s={a.steps * a.batch / dt:.1f} loss={loss.item():.4f} "
          f"torch={torch.__version__} gpu={torch.cuda.get_device_name(0).replace(' ', '_')}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--shape", default="3x224x224")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="bf16")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--feed", choices=["host", "device", "folder"], default="host")
    ap.add_argument("--data-dir", help="--feed folder: the folder with train/")
    ap.add_argument("--workers", type=int, default=4, help="--feed folder: DataLoader workers")
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_gpu_train: no CUDA device visible to torch")
    # PyTorch's defaults: TF32 in convolutions yes, in matmul no; fp32 asks
    # for neither.
    torch.backends.cudnn.allow_tf32 = a.precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.benchmark = True
    c, h, w = (int(v) for v in a.shape.split("x"))
    classes = 1000 if a.model == "resnet50" else 10
    torch.manual_seed(0)
    net, origin = build(a.model, c, classes)
    net = net.cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    step_fn = net
    if a.compile:
        step_fn = torch.compile(net)
    if a.feed == "folder":
        return train_folder(a, net, step_fn, opt, origin, h)
    nfeed = 3 if a.feed == "host" else 1
    xs = [torch.randn(a.batch, c, h, w).contiguous(memory_format=torch.channels_last)
          for _ in range(nfeed)]
    ys = [torch.randint(0, classes, (a.batch,)) for _ in range(nfeed)]
    if a.feed == "host":
        xs = [x.pin_memory() for x in xs]
        ys = [y.pin_memory() for y in ys]
    else:
        xs = [x.cuda() for x in xs]
        ys = [y.cuda() for y in ys]
    net.train()
    t0 = None
    for step in range(a.steps + a.warmup):
        if step == a.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        x = xs[step % nfeed].to("cuda", non_blocking=True)
        y = ys[step % nfeed].to("cuda", non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = F.cross_entropy(step_fn(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"impl=pytorch model={a.model} origin={origin} precision={a.precision} "
          f"compile={int(a.compile)} feed={a.feed} img_per_s={a.steps * a.batch / dt:.1f} "
          f"loss={loss.item():.4f} torch={torch.__version__} "
          f"gpu={torch.cuda.get_device_name(0).replace(' ', '_')}")


if __name__ == "__main__":
    main()
