#!/usr/bin/python3
"""The PyTorch side of the qkv benchmark: the same model, the same initial
weights, the same token batch and the same training step as bench_train.

    /usr/bin/python3 bench/bench_torch.py --config tiny --threads 1 \
        --init tiny.safetensors --batch tiny.batch.safetensors --json

bench_train --save-init/--save-batch writes the two files (qkv parameter
names; token ids stored as F32). This script builds the model from PyTorch's
own layers (nn.TransformerEncoderLayer / nn.TransformerDecoderLayer,
batch_first, dropout 0, norm_first as configured), copies the qkv weights in
(qkv w_q/w_k/w_v = row blocks of in_proj_weight, w_o = out_proj, ffn.linear1/2 =
linear1/2, cross_attn = multihead_attn) and times:

  step     optimizer.zero_grad(), forward, F.cross_entropy, backward,
           torch.optim.Adam step (lr 1e-3, the defaults qkv's Adam has too);
           median of --steps after --warmup untimed steps
  forward  forward + loss under torch.no_grad(), median of --steps

The model stays in train mode (dropout is 0, so the maths is the same as eval),
as in qkv; in eval mode PyTorch would switch its encoder layers to a fused
inference path that qkv's forward-only timing has no counterpart for.

One process per (configuration, thread setting): run.sh sets the environment
(OMP_WAIT_POLICY, OPENBLAS_NUM_THREADS) before Python starts, and peak RSS
(ru_maxrss) then belongs to this configuration alone.
"""

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pytorch"))

try:
    import numpy  # noqa: F401  (st.py needs it; fail here with a clear message)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # a pyenv python3 may shadow /usr/bin/python3
    sys.exit(f"bench_torch.py needs Debian's python3-torch and python3-numpy "
             f"(run it with /usr/bin/python3): {e}")

import st  # noqa: E402  (tests/pytorch/st.py: safetensors without pip packages)


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------

def sinusoidal(n, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same); (n, d) float32."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d, 2, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(10000.0, two_i / d)
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.float()


def causal_mask(t):
    """(t, t) float: -inf above the diagonal (query i may not see key j > i)."""
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1)


class Seq2Seq(nn.Module):
    """qkv's Seq2SeqTransformer: Post-LN, no final norms, untied generator."""

    def __init__(self, cfg):
        super().__init__()
        d, h, f, act = cfg["d_model"], cfg["heads"], cfg["d_ff"], cfg["activation"]
        pre = cfg["norm_first"]
        self.scale = math.sqrt(d)
        self.src_embed = nn.Embedding(cfg["vocab"], d)
        self.tgt_embed = nn.Embedding(cfg["vocab"], d)
        self.enc_layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d, h, f, dropout=0.0, activation=act,
                                       batch_first=True, norm_first=pre)
            for _ in range(cfg["encoder_layers"])])
        self.dec_layers = nn.ModuleList([
            nn.TransformerDecoderLayer(d, h, f, dropout=0.0, activation=act,
                                       batch_first=True, norm_first=pre)
            for _ in range(cfg["decoder_layers"])])
        self.generator = nn.Linear(d, cfg["vocab"])
        self.register_buffer("pe", sinusoidal(cfg["seq_len"], d), persistent=False)
        self.register_buffer("causal", causal_mask(cfg["seq_len"]), persistent=False)

    def forward(self, src, tgt):
        x = self.src_embed(src) * self.scale + self.pe[: src.shape[1]]
        for layer in self.enc_layers:
            x = layer(x)
        y = self.tgt_embed(tgt) * self.scale + self.pe[: tgt.shape[1]]
        t = tgt.shape[1]
        for layer in self.dec_layers:
            y = layer(y, x, tgt_mask=self.causal[:t, :t])
        return self.generator(y)  # (B, T, V)


class GPT(nn.Module):
    """qkv's GPT: learned positions, Pre-LN blocks, final norm, tied head (no bias)."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.tok_embed = nn.Embedding(cfg["vocab"], d)
        self.pos_embed = nn.Embedding(cfg["seq_len"], d)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d, cfg["heads"], cfg["d_ff"], dropout=0.0,
                                       activation=cfg["activation"], batch_first=True,
                                       norm_first=cfg["norm_first"])
            for _ in range(cfg["layers"])])
        self.norm = nn.LayerNorm(d)
        self.register_buffer("causal", causal_mask(cfg["seq_len"]), persistent=False)

    def forward(self, ids, _unused=None):
        t = ids.shape[1]
        x = self.tok_embed(ids) + self.pos_embed.weight[:t]  # no sqrt(D) scaling
        for layer in self.layers:
            x = layer(x, src_mask=self.causal[:t, :t])
        return F.linear(self.norm(x), self.tok_embed.weight)  # tied, no bias


# ---------------------------------------------------------------------------
# qkv parameter names -> this script's PyTorch state_dict
# ---------------------------------------------------------------------------

def mha_entries(sd, q, torch_prefix, qkv_prefix, used):
    """in_proj_weight = cat(Wq, Wk, Wv) by rows, in_proj_bias likewise; out_proj = w_o."""
    def take(name):
        used.add(name)
        return torch.from_numpy(q[name])
    sd[f"{torch_prefix}.in_proj_weight"] = torch.cat(
        [take(f"{qkv_prefix}.{w}.weight") for w in ("w_q", "w_k", "w_v")])
    sd[f"{torch_prefix}.in_proj_bias"] = torch.cat(
        [take(f"{qkv_prefix}.{w}.bias") for w in ("w_q", "w_k", "w_v")])
    sd[f"{torch_prefix}.out_proj.weight"] = take(f"{qkv_prefix}.w_o.weight")
    sd[f"{torch_prefix}.out_proj.bias"] = take(f"{qkv_prefix}.w_o.bias")


def state_dict_from_qkv(q, cfg):
    """Maps every qkv tensor onto the torch module's names; fails on leftovers."""
    sd, used = {}, set()

    def copy(torch_name, qkv_name):
        used.add(qkv_name)
        sd[torch_name] = torch.from_numpy(q[qkv_name])

    def layer_common(tp, qp, norms):
        for wb in ("weight", "bias"):
            copy(f"{tp}.linear1.{wb}", f"{qp}.ffn.linear1.{wb}")
            copy(f"{tp}.linear2.{wb}", f"{qp}.ffn.linear2.{wb}")
            for n in norms:
                copy(f"{tp}.{n}.{wb}", f"{qp}.{n}.{wb}")

    if cfg["model"] == "gpt":
        copy("tok_embed.weight", "tok_embed.weight")
        copy("pos_embed.weight", "pos_embed.weight")
        for i in range(cfg["layers"]):
            mha_entries(sd, q, f"layers.{i}.self_attn", f"layers.{i}.self_attn", used)
            layer_common(f"layers.{i}", f"layers.{i}", ("norm1", "norm2"))
        copy("norm.weight", "norm.weight")
        copy("norm.bias", "norm.bias")
    else:
        copy("src_embed.weight", "src_embed.weight")
        copy("tgt_embed.weight", "tgt_embed.weight")
        for i in range(cfg["encoder_layers"]):
            tp, qp = f"enc_layers.{i}", f"encoder.layers.{i}"
            mha_entries(sd, q, f"{tp}.self_attn", f"{qp}.self_attn", used)
            layer_common(tp, qp, ("norm1", "norm2"))
        for i in range(cfg["decoder_layers"]):
            tp, qp = f"dec_layers.{i}", f"decoder.layers.{i}"
            mha_entries(sd, q, f"{tp}.self_attn", f"{qp}.self_attn", used)
            mha_entries(sd, q, f"{tp}.multihead_attn", f"{qp}.cross_attn", used)
            layer_common(tp, qp, ("norm1", "norm2", "norm3"))
        copy("generator.weight", "generator.weight")
        copy("generator.bias", "generator.bias")
    left = sorted(set(q) - used)
    if left:
        sys.exit(f"bench_torch.py: qkv tensors with no PyTorch counterpart: {left}")
    return sd


def config_from_metadata(meta):
    ints = ("batch", "seq_len", "d_model", "heads", "d_ff", "vocab", "layers",
            "encoder_layers", "decoder_layers")
    cfg = {k: (int(v) if k in ints else v) for k, v in meta.items()}
    cfg["norm_first"] = meta["norm_first"] == "true"
    return cfg


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="name, for the report")
    ap.add_argument("--init", required=True, help="initial weights from bench_train --save-init")
    ap.add_argument("--batch", required=True, help="tokens from bench_train --save-batch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--setting", default="", help="label of the thread setting, for the report")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    weights, meta = st.load_file(args.init)
    batch, _ = st.load_file(args.batch)
    cfg = config_from_metadata(meta)
    if cfg["config"] != args.config:
        sys.exit(f"bench_torch.py: {args.init} holds config {cfg['config']}, not {args.config}")

    model = GPT(cfg) if cfg["model"] == "gpt" else Seq2Seq(cfg)
    model.load_state_dict(state_dict_from_qkv(weights, cfg), strict=True)
    model.train()  # dropout 0: same maths; see the module docstring

    src = torch.from_numpy(batch["src"]).long()
    tgt = torch.from_numpy(batch["tgt"]).long()
    targets = torch.from_numpy(batch["targets"]).long().reshape(-1)
    vocab = cfg["vocab"]

    def forward_loss():
        logits = model(tgt) if cfg["model"] == "gpt" else model(src, tgt)
        return F.cross_entropy(logits.reshape(-1, vocab), targets)

    opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # betas (0.9, 0.999), eps 1e-8

    def train_step():
        opt.zero_grad()
        loss = forward_loss()
        loss.backward()
        opt.step()
        return loss.item()

    loss_first = loss_last = None
    for i in range(args.warmup):
        loss = train_step()
        if i == 0:
            loss_first = loss
    step_s = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        loss_last = train_step()
        step_s.append(time.perf_counter() - t0)
        if loss_first is None:
            loss_first = loss_last

    fwd_s = []
    with torch.no_grad():
        for _ in range(max(1, args.warmup)):
            forward_loss()
        for _ in range(args.steps):
            t0 = time.perf_counter()
            forward_loss().item()
            fwd_s.append(time.perf_counter() - t0)

    step_ms = statistics.median(step_s) * 1e3
    tokens = cfg["batch"] * cfg["seq_len"]
    rec = {
        "impl": "torch", "config": args.config, "threads": args.threads,
        "setting": args.setting or f"{args.threads} thread(s)",
        "env": {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS",
                                           "OMP_NUM_THREADS") if k in os.environ},
        "torch_version": torch.__version__, "steps": args.steps, "warmup": args.warmup,
        "params": sum(p.numel() for p in model.parameters()),
        "step_ms": step_ms, "step_ms_min": min(step_s) * 1e3,
        "fwd_ms": statistics.median(fwd_s) * 1e3,
        "tokens_per_s": tokens / (step_ms * 1e-3),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "loss_first": loss_first, "loss_last": loss_last,
    }
    if args.json:
        print(json.dumps(rec))
    else:
        print(f"torch {args.config}, {rec['setting']}: step {step_ms:.3f} ms "
              f"(min {rec['step_ms_min']:.3f}), forward {rec['fwd_ms']:.3f} ms, "
              f"{rec['tokens_per_s']:.0f} tokens/s, peak RSS {rec['peak_rss_mb']:.1f} MB, "
              f"loss {loss_first:.5f} -> {loss_last:.5f}")


if __name__ == "__main__":
    main()
