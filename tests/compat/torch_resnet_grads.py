"""ddp-train's ResNet against PyTorch: the same weights (written by
build/tests/model-dump) must give the same loss and gradients on one
training batch, within 1e-4 relative (each tensor's largest difference
over its largest magnitude).

The PyTorch model here is written to match ddp-train's definition:
torchvision-style names and order, 1x1-conv + BN shortcuts (option B),
CIFAR-style stem for resnet20/32/..., ImageNet-style for resnet18/50."""
import json
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Basic(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = None
        if stride != 1 or cin != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes * 4, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.downsample(x) if self.downsample else x))


class ResNet(nn.Module):
    def __init__(self, name, cin, classes):
        super().__init__()
        depth = int(name[len("resnet"):])
        imagenet = {18: (Basic, [2, 2, 2, 2]), 34: (Basic, [3, 4, 6, 3]),
                    50: (Bottleneck, [3, 4, 6, 3])}
        if depth in imagenet:
            block, blocks = imagenet[depth]
            planes, width = [64, 128, 256, 512], 64
            self.conv1 = nn.Conv2d(cin, 64, 7, 2, 3, bias=False)
            self.pool = True
        else:
            block, blocks = Basic, [(depth - 2) // 6] * 3
            planes, width = [16, 32, 64], 16
            self.conv1 = nn.Conv2d(cin, 16, 3, 1, 1, bias=False)
            self.pool = False
        self.bn1 = nn.BatchNorm2d(width)
        cur = width
        for s, (n, p) in enumerate(zip(blocks, planes)):
            layer = []
            for i in range(n):
                layer.append(block(cur, p, 2 if i == 0 and s > 0 else 1))
                cur = p * block.expansion
            setattr(self, f"layer{s + 1}", nn.Sequential(*layer))
        self.nstages = len(blocks)
        self.fc = nn.Linear(cur, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if self.pool:
            x = F.max_pool2d(x, 3, 2, 1)
        for s in range(self.nstages):
            x = getattr(self, f"layer{s + 1}")(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main(d):
    meta = json.load(open(f"{d}/meta.json"))
    c, h, w = meta["input_shape"]
    n = meta["batch"]
    params = np.fromfile(f"{d}/params.f32", dtype="<f4")
    grads = np.fromfile(f"{d}/grads.f32", dtype="<f4")
    x = torch.from_numpy(np.fromfile(f"{d}/input.f32", dtype="<f4").reshape(n, c, h, w))
    y = torch.from_numpy(np.fromfile(f"{d}/labels.i32", dtype="<i4").astype(np.int64))
    torch.manual_seed(0)
    net = ResNet(meta["model"], c, meta["classes"])
    named = dict(net.named_parameters())
    assert list(named) == [p["name"] for p in meta["params"]], "parameter order differs"
    with torch.no_grad():
        for p in meta["params"]:
            v = params[p["offset"]:p["offset"] + p["count"]].reshape(p["shape"])
            named[p["name"]].copy_(torch.from_numpy(v.copy()))
    net.train()
    # Both sides in float32. (Against float64 both differ by ~1e-3 in the
    # first layers of a freshly initialised net, and by the same amount:
    # that is float32's own limit there, not either implementation's.)
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    worst = 0.0
    rel_loss = abs(loss.item() - meta["loss"]) / abs(loss.item())
    print(f"loss: ours {meta['loss']:.7f} torch {loss.item():.7f} (relative {rel_loss:.2e})")
    for p in meta["params"]:
        ours = grads[p["offset"]:p["offset"] + p["count"]].astype(np.float64)
        ref = named[p["name"]].grad.double().numpy().reshape(-1)
        err = np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-12)
        worst = max(worst, err)
        if err > 1e-4:
            print(f"  {p['name']}: relative error {err:.2e}")
    print(f"largest relative gradient error: {worst:.2e} over {len(meta['params'])} tensors")
    ok = rel_loss <= 1e-4 and worst <= 1e-4
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
