"""torchvision's side of `make bench-data`: ImageFolder + DataLoader over the
same folder, with the reference training transforms (RandomResizedCrop,
RandomHorizontalFlip, ToTensor, Normalize with ImageNet's mean and std), PIL
decoding, num_workers worker processes (0: the main process alone). Prints
img_per_s=N after --warmup batches not counted."""
import argparse
import time

import torch
import torchvision
from torchvision import transforms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    a = ap.parse_args()
    torch.set_num_threads(1)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(a.size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    ds = torchvision.datasets.ImageFolder(a.root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True,
                                     num_workers=a.workers, drop_last=True,
                                     persistent_workers=a.workers > 0)
    n, t0, it = 0, None, iter(dl)
    for i in range(a.steps + a.warmup):
        if i == a.warmup:
            t0 = time.perf_counter()
        try:
            x, _ = next(it)
        except StopIteration:
            it = iter(dl)
            x, _ = next(it)
        if t0 is not None:
            n += x.shape[0]
    print(f"img_per_s={n / (time.perf_counter() - t0):.1f}")


if __name__ == "__main__":
    main()
