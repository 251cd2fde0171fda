#!/usr/bin/python3
"""The PyTorch side of bench_decode: the same weights, the same sources, the
same fixed-length greedy decoding (len + 1 tokens per source, <eos> ignored).

    build/rel-f32/bench_decode --len 32 --modes cached --save-init w.safetensors \
        --save-src src.safetensors --save-out out.safetensors
    /usr/bin/python3 bench/bench_decode_torch.py --init w.safetensors \
        --src src.safetensors --out out.safetensors --threads 1 --json

The model is tests/pytorch/reference.py's TorchSeq2Seq (PyTorch's own
nn.TransformerEncoderLayer / nn.TransformerDecoderLayer, batch_first, Post-LN),
loaded with the qkv weights through its Binding, in eval mode under
torch.no_grad(). Two decoding loops, each timed over all sources in batches,
best of --repeats passes:

  recompute  the loop users write around nn.Transformer (the Annotated
             Transformer's greedy_decode): encode once, then every step run
             the decoder layers over the whole prefix ys (B, t) with a causal
             mask, take the argmax of the last position and append it.
  cached     the same model with a hand-written key/value cache: each step
             embeds only the new token, computes its q/k/v with the layers'
             in_proj weights, appends k/v to preallocated (B, H, steps, d_k)
             buffers, attends with matmul + softmax, and uses cross-attention
             keys/values of the memory computed once.

Both report the fraction of sources whose tokens equal qkv's cached greedy
output (--out), a check that the three loops decode the same thing.
"""

import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pytorch"))

try:
    import numpy  # noqa: F401  (st.py needs it; fail here with a clear message)
    import torch
    import torch.nn.functional as F
except ImportError as e:  # a pyenv python3 may shadow /usr/bin/python3
    sys.exit(f"bench_decode_torch.py needs Debian's python3-torch and python3-numpy "
             f"(run it with /usr/bin/python3): {e}")

import st  # noqa: E402  (tests/pytorch/st.py)
from reference import TorchSeq2Seq, causal_mask, sinusoidal  # noqa: E402


def build_model(meta, weights):
    if meta["norm_first"] != "false" or meta["activation"] != "relu" or meta["positions"] != "sinusoidal":
        sys.exit("bench_decode_torch.py: expects bench_decode's Post-LN, ReLU, sinusoidal model")
    v = int(meta["vocab"])
    cfg = dict(d_model=int(meta["d_model"]), heads=int(meta["heads"]), d_ff=int(meta["d_ff"]),
               activation="relu", norm_first=False, src_vocab=v, tgt_vocab=v,
               enc_layers=int(meta["encoder_layers"]), dec_layers=int(meta["decoder_layers"]),
               tied=meta["tied"] == "true")
    model = TorchSeq2Seq(cfg)
    model.binding().load({k: torch.from_numpy(a) for k, a in weights.items()})
    model.eval()
    return model


def encode(model, src):
    """(B, S) -> memory (B, S, D); the sources have no padding."""
    s = src.shape[1]
    x = model.src_embed(src) * math.sqrt(model.d) + sinusoidal(s, model.d)
    for layer in model.enc_layers:
        x = layer(x)
    return x


def generator(model, y):
    w = model.tgt_embed.weight if model.tied else model.gen_weight
    return F.linear(y, w, model.gen_bias)


def decode_recompute(model, src, steps, bos):
    """Greedy decoding as users write it around nn.TransformerDecoderLayer."""
    mem = encode(model, src)
    ys = torch.full((src.shape[0], 1), bos, dtype=torch.long)
    for _ in range(steps):
        t = ys.shape[1]
        y = model.tgt_embed(ys) * math.sqrt(model.d) + sinusoidal(t, model.d)
        for layer in model.dec_layers:
            y = layer(y, mem, tgt_mask=causal_mask(t))
        nxt = generator(model, y[:, -1]).argmax(-1)  # (B,)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
    return ys[:, 1:]


def decode_cached(model, src, steps, bos):
    """The same greedy decoding with a key/value cache (Post-LN layers)."""
    mem = encode(model, src)  # (B, S, D)
    B, S, D = mem.shape
    layers = model.dec_layers
    H = layers[0].self_attn.num_heads
    dk = D // H
    scale = 1.0 / math.sqrt(dk)

    def heads(x, n):  # (B, n, D) -> (B, H, n, d_k)
        return x.view(B, n, H, dk).transpose(1, 2)

    def attend(q, k, v):  # q (B, H, d_k), k/v (B, H, L, d_k) -> (B, D)
        p = torch.softmax(torch.matmul(k, q.unsqueeze(-1)).squeeze(-1) * scale, dim=-1)  # (B, H, L)
        return torch.matmul(p.unsqueeze(-2), v).reshape(B, D)

    cross = []  # per layer: memory keys and values, (B, H, S, d_k) each, computed once
    for layer in layers:
        a = layer.multihead_attn
        kv = F.linear(mem, a.in_proj_weight[D:], a.in_proj_bias[D:])  # (B, S, 2D)
        cross.append((heads(kv[..., :D], S), heads(kv[..., D:], S)))
    kcache = [torch.empty(B, H, steps, dk) for _ in layers]
    vcache = [torch.empty(B, H, steps, dk) for _ in layers]
    pe = sinusoidal(steps, D)
    tok = torch.full((B,), bos, dtype=torch.long)
    out = torch.empty(B, steps, dtype=torch.long)
    for t in range(steps):
        x = model.tgt_embed(tok) * math.sqrt(D) + pe[t]  # (B, D)
        for i, layer in enumerate(layers):
            a = layer.self_attn
            q, k, v = F.linear(x, a.in_proj_weight, a.in_proj_bias).view(B, 3, H, dk).unbind(1)
            kcache[i][:, :, t] = k
            vcache[i][:, :, t] = v
            x = layer.norm1(x + a.out_proj(attend(q, kcache[i][:, :, :t + 1], vcache[i][:, :, :t + 1])))
            c = layer.multihead_attn
            q = F.linear(x, c.in_proj_weight[:D], c.in_proj_bias[:D]).view(B, H, dk)
            x = layer.norm2(x + c.out_proj(attend(q, *cross[i])))
            x = layer.norm3(x + layer.linear2(F.relu(layer.linear1(x))))
        tok = generator(model, x).argmax(-1)
        out[:, t] = tok
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True, help="weights from bench_decode --save-init")
    ap.add_argument("--src", required=True, help="sources from bench_decode --save-src")
    ap.add_argument("--out", help="qkv's cached greedy outputs (bench_decode --save-out), to compare")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--setting", default="", help="label of the thread setting, for the report")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default="recompute,cached")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    weights, meta = st.load_file(args.init)
    srcs, _ = st.load_file(args.src)
    model = build_model(meta, weights)
    src = torch.from_numpy(srcs["src"]).long()
    count, length = src.shape
    steps, bos = length + 1, int(meta["bos"])
    want = None
    if args.out:
        outs, _ = st.load_file(args.out)
        want = torch.from_numpy(outs["out"]).long()

    for mode in args.modes.split(","):
        fn = {"recompute": decode_recompute, "cached": decode_cached}[mode]
        with torch.no_grad():
            fn(model, src[:args.batch], steps, bos)  # warm-up
            best = float("inf")
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                got = torch.cat([fn(model, src[i:i + args.batch], steps, bos)
                                 for i in range(0, count, args.batch)])
                best = min(best, time.perf_counter() - t0)
        same = float((got == want).all(dim=1).float().mean()) if want is not None else -1.0
        rec = {"impl": "torch", "mode": mode, "len": length, "count": count, "batch": args.batch,
               "threads": args.threads, "setting": args.setting or f"{args.threads} thread(s)",
               "seconds": best, "tokens_per_s": count * steps / best, "same_as_qkv": same,
               "torch_version": torch.__version__}
        if args.json:
            print(json.dumps(rec), flush=True)
        else:
            print(f"torch {mode:9s} len {length}, {count} sources, batch {args.batch}, "
                  f"{rec['setting']}: {best:.3f} s, {rec['tokens_per_s']:.0f} tokens/s, "
                  f"same tokens as qkv: {100 * same:.1f}%", flush=True)


if __name__ == "__main__":
    main()
