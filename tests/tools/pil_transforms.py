"""The evaluation view of an image folder as torchvision makes it with PIL
(ImageFolder's order, Resize(S * 256 // 224) of the shorter side, bilinear,
CenterCrop(S), ToTensor, ImageNet's Normalize), against build/tests/data-dump's
samples of the same folder. Prints the largest and the mean difference per
image in levels of 255; exits 1 when an image passes MAX levels at most or
MEAN on average.

usage: pil_transforms.py DATA_DUMP ROOT SPLIT S MAX MEAN"""
import os
import subprocess
import sys

import numpy as np
from PIL import Image

dump, root, split, S = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
max_levels, mean_levels = float(sys.argv[5]), float(sys.argv[6])
top = os.path.join(root, split)
classes = sorted(e.name for e in os.scandir(top) if e.is_dir())
files = []
for k, c in enumerate(classes):
    for r, _, fs in sorted(os.walk(os.path.join(top, c), followlinks=True)):
        files += [(os.path.join(r, f), k) for f in sorted(fs)
                  if f.lower().endswith((".jpg", ".jpeg", ".png"))]
out = subprocess.run([dump, "imagefolder", root, split, str(S), "0", "1", "0"]
                     + [str(i) for i in range(len(files))], capture_output=True)
if out.returncode:
    sys.exit(f"data-dump failed: {out.stderr.decode()}")
lines = out.stderr.decode().split("\n")
c, h, w = map(int, lines[0].split())
got = np.frombuffer(out.stdout, dtype=np.float32).reshape(len(files), c, h, w)
mean = np.array([0.485, 0.456, 0.406], dtype=np.float32)[:, None, None]
std = np.array([0.229, 0.224, 0.225], dtype=np.float32)[:, None, None]
bad = 0
for i, (path, label) in enumerate(files):
    if int(lines[1 + i]) != label:
        print(f"{path}: label {lines[1 + i]}, torchvision's {label}")
        bad += 1
    img = Image.open(path).convert("RGB")
    W, H = img.size
    r = S * 256 // 224
    nw, nh = (r, int(r * H / W)) if W <= H else (int(r * W / H), r)
    img = img.resize((nw, nh), Image.BILINEAR)
    y, x = int(round((nh - S) / 2.0)), int(round((nw - S) / 2.0))
    img = img.crop((x, y, x + S, y + S))
    want = (np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255 - mean) / std
    diff = np.abs((got[i] - want) * std * 255)
    print(f"{os.path.relpath(path, top)} {W}x{H}: {diff.max():.2f} levels at most, "
          f"{diff.mean():.2f} on average")
    if diff.max() > max_levels or diff.mean() > mean_levels:
        bad += 1
sys.exit(1 if bad else 0)
