#!/usr/bin/python3
"""The same Vision Transformer as `make vit`, in PyTorch, for a side-by-side.

Reads Fashion-MNIST's IDX files as qkv does (Debian's dataset-fashion-mnist),
holds out --valid-fraction of the training images for model selection, and
trains for a wall-clock budget (held-out checks included), then scores the
10,000 test images once. The model matches qkv's `--model vit` (trainer/
family_vit.cpp, models/vit.h): a P x P patch projection (a stride-P conv),
a class token, learned positions, Pre-LN encoder layers with GELU, a final
LayerNorm and a linear head on the class token; Adam with warm-up and a
cosine schedule to 5% of the peak, the gradient norm clipped at 1.
`--augment crop:K,flip` is torchvision's RandomCrop(28, padding=K) and
RandomHorizontalFlip on the training batches, as qkv's flag of that name;
`--autocast bf16` runs the forward pass and the loss under
torch.autocast('cpu', dtype=torch.bfloat16), as bench/bench_torch.py does.

  /usr/bin/python3 tools/vit_torch.py --minutes 10 --threads 2 --seed 1
"""
import argparse
import gzip
import math
import struct
import time

import numpy as np
import torch
from torch import nn


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class ViT(nn.Module):
    def __init__(self, image, patch, d_model, heads, layers, d_ff, classes, dropout):
        super().__init__()
        n = (image // patch) ** 2
        self.patch = nn.Conv2d(1, d_model, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d_model) * 0.02)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout=dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x):  # (B, 1, H, W) in [0, 1]
        z = self.patch(x).flatten(2).transpose(1, 2)  # (B, N, D)
        z = self.drop(torch.cat([self.cls.expand(z.shape[0], -1, -1), z], 1) + self.pos)
        return self.head(self.norm(self.encoder(z))[:, 0])


def parse_augment(text):
    """qkv's --augment syntax: "crop:K", "flip" or "crop:K,flip"."""
    crop, flip = 0, False
    for part in filter(None, text.split(",")):
        if part == "flip":
            flip = True
        elif part.startswith("crop:") and part[5:].isdigit() and 0 < int(part[5:]) < 28:
            crop = int(part[5:])
        else:
            shown = part if len(part) <= 40 else part[:40] + "..."
            raise SystemExit(f"--augment: {shown!r} is neither crop:K (0 < K < 28) nor flip")
    return crop, flip


def augment(xb, crop, flip, gen):
    """A batch (B, 1, H, W) padded by `crop` zeros and cut back at a random
    offset per image, then mirrored left to right with probability 1/2."""
    b, _, h, w = xb.shape
    if crop:
        padded = nn.functional.pad(xb, (crop, crop, crop, crop))
        oy = torch.randint(0, 2 * crop + 1, (b, 1, 1), generator=gen)
        ox = torch.randint(0, 2 * crop + 1, (b, 1, 1), generator=gen)
        rows = (oy + torch.arange(h).view(1, h, 1)).expand(b, h, w)
        cols = (ox + torch.arange(w).view(1, 1, w)).expand(b, h, w)
        xb = padded[torch.arange(b).view(b, 1, 1), 0, rows, cols].unsqueeze(1)
    if flip:
        mirror = torch.rand(b, generator=gen) < 0.5
        xb = torch.where(mirror.view(b, 1, 1, 1), xb.flip(-1), xb)
    return xb


def accuracy(model, x, y, batch=1000):
    model.eval()
    right = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            right += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return right / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--patch", type=int, default=7)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-ff", type=int, default=256)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--steps", type=int, default=0,
                    help="the cosine schedule's length (0: estimated from the first 50 steps)")
    ap.add_argument("--valid-fraction", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--weight-decay", type=float, default=0.0, help="AdamW's (0: Adam)")
    ap.add_argument("--label-smoothing", type=float, default=0.0)
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--augment", default="", help="crop:K,flip (as qkv's --augment)")
    ap.add_argument("--autocast", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: forward and loss under torch.autocast('cpu', torch.bfloat16)")
    a = ap.parse_args()
    crop, flip = parse_augment(a.augment)
    gen = torch.Generator().manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    x = read_idx(f"{a.data}/train-images-idx3-ubyte.gz").astype(np.float32) / 255
    y = read_idx(f"{a.data}/train-labels-idx1-ubyte.gz").astype(np.int64)
    tx = read_idx(f"{a.data}/t10k-images-idx3-ubyte.gz").astype(np.float32) / 255
    ty = read_idx(f"{a.data}/t10k-labels-idx1-ubyte.gz").astype(np.int64)
    order = rng.permutation(len(x))
    nv = round(a.valid_fraction * len(x))
    vx, vy = torch.from_numpy(x[order[:nv]]).unsqueeze(1), torch.from_numpy(y[order[:nv]])
    x, y = torch.from_numpy(x[order[nv:]]).unsqueeze(1), torch.from_numpy(y[order[nv:]])
    tx, ty = torch.from_numpy(tx).unsqueeze(1), torch.from_numpy(ty)
    model = ViT(28, a.patch, a.d_model, a.heads, a.layers, a.d_ff, 10, a.dropout)
    if a.weight_decay > 0:  # qkv's adamw decays the Linear weights only
        decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "pos" not in n]
        rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "pos" not in n)]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                                 {"params": rest, "weight_decay": 0.0}], lr=a.lr,
                                betas=(0.9, 0.98))
    else:
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, 0.98))
    budget = a.minutes * 60
    steps = a.steps
    t0 = time.time()
    step = 0
    epoch_start, epoch = t0, 0
    print(f"torch {torch.__version__}, {a.threads} threads, {a.autocast}, augment {a.augment!r}, "
          f"{sum(p.numel() for p in model.parameters())} parameters, {len(x)} training images")
    while True:
        perm = torch.randperm(len(x))
        for i in range(0, len(x) - a.batch + 1, a.batch):
            if steps == 0 and step == 50:  # the schedule's length from the speed so far
                per_step = (time.time() - t0) / 50
                steps = int(budget / per_step * 0.95)
                print(f"~{per_step * 1000:.1f} ms a step: a cosine schedule of {steps} steps")
            total = steps or 10 ** 9
            lr = a.lr * min(1, (step + 1) / a.warmup)
            if step >= a.warmup:
                p = min(1, (step - a.warmup) / max(1, total - a.warmup))
                lr = a.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p)))
            for g in opt.param_groups:
                g["lr"] = lr
            idx = perm[i:i + a.batch]
            xb = augment(x[idx], crop, flip, gen) if crop or flip else x[idx]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
                loss = nn.functional.cross_entropy(model(xb).float(), y[idx],
                                                   label_smoothing=a.label_smoothing)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            if step % a.eval_every == 0:
                print(f"step {step}: loss {loss.item():.4f}, held-out accuracy "
                      f"{100 * accuracy(model, vx, vy):.2f}% at {time.time() - t0:.0f} s")
            if time.time() - t0 > budget or (a.steps and step >= a.steps):
                break
        else:
            epoch += 1
            now = time.time()
            print(f"epoch {epoch}: {now - epoch_start:.1f} s")
            epoch_start = now
            continue
        break
    elapsed = time.time() - t0
    print(f"trained {step} steps ({step * a.batch / len(x):.1f} epochs) in {elapsed:.0f} s")
    print(f"held-out accuracy {100 * accuracy(model, vx, vy):.2f}%")
    print(f"test accuracy {100 * accuracy(model, tx, ty):.2f}% (scored once)")


if __name__ == "__main__":
    main()
