#!/usr/bin/python3
"""The PyTorch side of the character-level GPT benchmark (bench/run_chargpt.sh).

A character-level GPT written the way most people first write one (the
minimal GPT of nanoGPT / "Let's build GPT": a stacked QKV linear, a masked
softmax, a GELU MLP, Pre-LN blocks, tied embedding and output weights,
Adam), trained on the same text with the same split, the same batches'
shape and the same optimiser settings as

    build/rel-f32/train --model gpt --data CORPUS --format text ...

so that ms/step and the held-out loss after a fixed number of steps can be
put side by side. The data follow the trainer (trainer/trainer.cpp,
data/loaders.h): characters are the tokens; the last --valid-fraction of the
stream is held out; the vocabulary is the distinct characters of the rest
plus the trainer's four specials (<pad> <s> </s> <unk>); a batch is --batch
windows of --context + 1 characters at random offsets; the held-out loss is
the mean cross-entropy over the held-out stream cut into consecutive windows.
The schedule is the trainer's: linear warm-up over --warmup steps to --lr,
then a cosine to --min-lr (default 5% of --lr) at the last step; Adam with
betas (0.9, --beta2 0.98) and eps 1e-9 (the trainer's defaults); gradient
norm clipped to 1. --optimizer adamw --weight-decay W decays as the trainer
does (nn::weight_decay_mask): the weights of the linear layers, not biases,
LayerNorm gains or the embeddings (so not the tied output weights either;
nanoGPT decays its embeddings too). The weights are
initialised as nanoGPT does (normal, std 0.02; zero biases), not as qkv does:
the two sides do not share weights or batches, so their held-out losses are
compared over seeds, not step by step.

    /usr/bin/python3 bench/chargpt_torch.py --data corpus.txt --steps 1000 \
        --threads 2 --seed 1 --json

ms/step is the training loop's wall time (batches drawn, forward, loss,
backward, clipping, the Adam step) over the steps, evaluation excluded, as
the trainer reports it. --eval-every N also scores the held-out text every N
steps, as the trainer's --eval-every does, and the JSON's "curve" lists
[step, training seconds so far (evaluations excluded), held-out loss].
--valid FILE holds out a file instead of the last --valid-fraction (the
trainer's --valid). --autocast bf16 runs forward and loss under
torch.autocast('cpu', dtype=torch.bfloat16), the held-out scoring too (as
a PyTorch user's evaluation would be).
"""

import argparse
import json
import math
import os
import resource
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # a pyenv python3 may shadow /usr/bin/python3
    sys.exit(f"chargpt_torch.py needs Debian's python3-torch (run it with /usr/bin/python3): {e}")


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, context):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)  # Q, K, V stacked
        self.c_proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(context, context))
                             .view(1, 1, context, context))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)  # (B, h, T, d_k)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, d, heads, d_ff, context):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, context)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, d, heads, layers, d_ff, context):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.blocks = nn.ModuleList([Block(d, heads, d_ff, context) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.size()
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def lr_at(step, peak, floor, warmup, total):
    """The trainer's WarmupCosineSchedule (optim/schedule.cpp), step from 1."""
    if step <= warmup:
        return peak * step / warmup
    if step > total:
        return floor
    progress = (step - warmup) / (total - warmup)
    return floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a UTF-8 text file")
    ap.add_argument("--valid", default=None, help="held-out text file (else part of --data)")
    ap.add_argument("--valid-fraction", type=float, default=0.1)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--d-ff", type=int, default=512)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--min-lr", type=float, default=None)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--optimizer", choices=["adam", "adamw"], default="adam")
    ap.add_argument("--beta2", type=float, default=0.98)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--eval-every", type=int, default=0, help="0: only at the end")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one JSON line instead of text")
    a = ap.parse_args()
    if a.min_lr is None:
        a.min_lr = 0.05 * a.lr
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    with open(a.data, encoding="utf-8") as f:
        chars = list(f.read())
    if a.valid:
        train_chars = chars
        with open(a.valid, encoding="utf-8") as f:
            valid_chars = list(f.read())
    else:
        n_valid = int(a.valid_fraction * len(chars))
        train_chars, valid_chars = chars[:len(chars) - n_valid], chars[len(chars) - n_valid:]
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    itos = specials + sorted(set(train_chars))
    stoi = {c: i for i, c in enumerate(itos)}
    train = torch.tensor([stoi[c] for c in train_chars], dtype=torch.long)
    valid = torch.tensor([stoi.get(c, 3) for c in valid_chars], dtype=torch.long)
    T, B = a.context, a.batch

    model = GPT(len(itos), a.d_model, a.heads, a.layers, a.d_ff, T)
    if a.optimizer == "adamw":
        decayed = {id(m.weight) for m in model.modules()
                   if isinstance(m, nn.Linear) and m is not model.lm_head}
        groups = [{"params": [p for p in model.parameters() if id(p) in decayed],
                   "weight_decay": a.weight_decay},
                  {"params": [p for p in model.parameters() if id(p) not in decayed],
                   "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, a.beta2), eps=1e-9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, a.beta2), eps=1e-9,
                               weight_decay=a.weight_decay)
    bf16 = a.autocast == "bf16"
    gen = torch.Generator().manual_seed(a.seed)
    offsets = torch.arange(T + 1)

    def batch():
        at = torch.randint(0, len(train) - T, (B,), generator=gen)
        w = train[at.unsqueeze(1) + offsets]  # (B, T + 1)
        return w[:, :-1], w[:, 1:]

    def heldout():
        """Consecutive windows, every held-out character scored once."""
        model.eval()
        n_win = (len(valid) - 1) // T
        total, count = 0.0, 0
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            for w0 in range(0, n_win, B):
                nb = min(B, n_win - w0)
                idx = torch.arange(w0, w0 + nb).unsqueeze(1) * T + offsets
                w = valid[idx]
                total += model(w[:, :-1], w[:, 1:]).float().item() * nb * T
                count += nb * T
        model.train()
        return total / count, count

    model.train()
    first_loss = None
    curve = []
    train_s = 0.0
    t0 = time.perf_counter()
    for step in range(1, a.steps + 1):
        x, y = batch()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.lr, a.min_lr, a.warmup, a.steps)
        opt.step()
        if first_loss is None:
            first_loss = loss.item()
        if a.eval_every > 0 and step % a.eval_every == 0 and step < a.steps:
            train_s += time.perf_counter() - t0  # the clock stops while scoring
            curve.append([step, train_s, heldout()[0]])
            t0 = time.perf_counter()
    last_loss = loss.item()
    train_s += time.perf_counter() - t0
    heldout_loss, count = heldout()
    curve.append([a.steps, train_s, heldout_loss])
    out = {
        "side": "pytorch", "threads": a.threads, "seed": a.seed, "steps": a.steps,
        "precision": "bf16" if bf16 else "fp32", "curve": curve,
        "ms_per_step": 1000 * train_s / a.steps, "heldout_loss": heldout_loss,
        "heldout_tokens": count, "vocab": len(itos), "first_loss": first_loss,
        "last_loss": last_loss,
        "parameters": sum(p.numel() for p in model.parameters()),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "torch": torch.__version__,
    }
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
