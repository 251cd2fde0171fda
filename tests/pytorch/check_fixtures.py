#!/usr/bin/python3
"""Sanity-check the fixtures in tests/fixtures/ (numpy only, no torch needed).

    /usr/bin/python3 tests/pytorch/check_fixtures.py   (any python3 with numpy)

Two kinds of checks:
  1. Structure: every expected key is present, every param.X has a grad.X of
     the same shape, everything is finite, losses are positive.
  2. SPEC.md agreement: the forward passes (and the optimizer updates) are
     recomputed here in float64 numpy straight from the formulas in SPEC.md,
     using the qkv-named parameters, and compared with what PyTorch produced.
     This proves the qkv <-> PyTorch name mapping and the SPEC maths agree;
     gradients are only checked structurally (they come from PyTorch autograd).

Prints "N passed, N failed" and exits non-zero on any failure.
"""

import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402

FIXTURES = os.path.normpath(os.path.join(HERE, "..", "fixtures"))

# Forward outputs are recomputed in float64 from F32-stored inputs; PyTorch's
# float64 result was rounded to F32, so agreement is at float32 rounding level.
ATOL, RTOL = 2e-6, 2e-5

results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    if ok:
        results["passed"] += 1
    else:
        results["failed"] += 1
        print(f"FAIL {name} {detail}")


def close(name, got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    ok = got.shape == want.shape and np.allclose(got, want, atol=ATOL, rtol=RTOL)
    detail = (f"shape {got.shape} vs {want.shape}" if got.shape != want.shape
              else f"max abs diff {np.max(np.abs(got - want)):.3g}")
    check(name, ok, detail)


def load(name):
    t, meta = st.load_file(os.path.join(FIXTURES, name))
    return {k: v.astype(np.float64) for k, v in t.items()}, meta


# ---------------------------------------------------------------------------
# SPEC.md maths in numpy (float64)
# ---------------------------------------------------------------------------

def join(prefix, name):
    """Dotted parameter name; an empty prefix gives the bare name."""
    return f"{prefix}.{name}" if prefix else name


def linear(x, p, name, bias=True):
    """x W^T + b; no b when bias is False or p has no `name.bias`."""
    y = x @ p[join(name, "weight")].T
    return y + p[join(name, "bias")] if bias and join(name, "bias") in p else y


def layer_norm(x, p, name, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)  # biased variance
    return (x - mu) / np.sqrt(var + eps) * p[join(name, "weight")] + p[join(name, "bias")]


def erf(x):
    return np.vectorize(math.erf)(x)


def act_fn(name):
    if name == "relu":
        return lambda x: np.maximum(x, 0.0)
    return lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))  # exact GELU


def softmax(x, axis=-1):
    x = x - x.max(axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis, keepdims=True)


def pad_mask(lens, n):
    """(B, n) True where key j >= len[b] (masked)."""
    return np.arange(n)[None, :] >= np.asarray(lens)[:, None]


def causal(t):
    """(t, t) True where key j > query i (masked)."""
    return np.triu(np.ones((t, t), bool), 1)


def heads_of(xq, xkv, p, name, heads):
    """Q (B,H,T,d_k), K (B,H,S,d_k), V (B,H,S,d_v): d_k read off w_q (H*d_k, D), d_v = D / H."""
    b, t, d = xq.shape
    s = xkv.shape[1]
    dk = p[join(name, "w_q.weight")].shape[0] // heads
    split = lambda z, n, w: z.reshape(b, n, heads, w).transpose(0, 2, 1, 3)  # (B,H,n,w)
    q = split(linear(xq, p, join(name, "w_q")), t, dk)
    k = split(linear(xkv, p, join(name, "w_k")), s, dk)
    v = split(linear(xkv, p, join(name, "w_v")), s, d // heads)
    return q, k, v


def merge(o):
    """(B,H,T,d_v) -> (B,T,D)."""
    b, h, t, dv = o.shape
    return o.transpose(0, 2, 1, 3).reshape(b, t, h * dv)


def mha(xq, xkv, p, name, heads, mask):
    """SPEC MultiHeadAttention; mask broadcastable to (B, T, S), True = masked.
    Returns (out (B,T,D), probabilities (B,H,T,S))."""
    q, k, v = heads_of(xq, xkv, p, name, heads)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    scores = np.where(mask[:, None, :, :], -np.inf, scores)
    probs = softmax(scores)
    return linear(merge(probs @ v), p, join(name, "w_o")), probs


def linear_mha(xq, xkv, p, heads, mask):
    """qkv's linear attention: A = phi(Q) phi(K)^T with hidden entries 0,
    O = A V / rowsum(A), phi = elu + 1; no scale."""
    phi = lambda z: np.where(z > 0, z + 1.0, np.exp(np.minimum(z, 0.0)))
    q, k, v = heads_of(xq, xkv, p, "", heads)
    a = np.where(mask[:, None, :, :], 0.0, phi(q) @ phi(k).transpose(0, 1, 3, 2))
    return linear(merge((a @ v) / a.sum(-1, keepdims=True)), p, "w_o")


def sparse_hidden(t, window, every):
    """(t, t) True where qkv's sparse pattern hides key j from query i."""
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    return ~((np.abs(i - j) < window) | (j % every == 0) | (i % every == 0))


def ffn(x, p, name, act):
    return linear(act(linear(x, p, join(name, "linear1"))), p, join(name, "linear2"))


def encoder_layer(x, p, name, heads, mask, pre, act):
    sa = lambda z: mha(z, z, p, name + ".self_attn", heads, mask)[0]
    ff = lambda z: ffn(z, p, name + ".ffn", act)
    if pre:
        x = x + sa(layer_norm(x, p, name + ".norm1"))
        return x + ff(layer_norm(x, p, name + ".norm2"))
    x = layer_norm(x + sa(x), p, name + ".norm1")
    return layer_norm(x + ff(x), p, name + ".norm2")


def decoder_layer(y, mem, p, name, heads, self_mask, cross_mask, pre, act):
    sa = lambda z: mha(z, z, p, name + ".self_attn", heads, self_mask)[0]
    ca = lambda z: mha(z, mem, p, name + ".cross_attn", heads, cross_mask)[0]
    ff = lambda z: ffn(z, p, name + ".ffn", act)
    if pre:
        y = y + sa(layer_norm(y, p, name + ".norm1"))
        y = y + ca(layer_norm(y, p, name + ".norm2"))
        return y + ff(layer_norm(y, p, name + ".norm3"))
    y = layer_norm(y + sa(y), p, name + ".norm1")
    y = layer_norm(y + ca(y), p, name + ".norm2")
    return layer_norm(y + ff(y), p, name + ".norm3")


def sinusoidal(n, d):
    pe = np.zeros((n, d))
    pos = np.arange(n)[:, None]
    angle = pos / np.power(10000.0, np.arange(0, d, 2)[None, :] / d)
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return pe


def cross_entropy(logits, targets, ignore_index=None, eps=0.0):
    """SPEC cross-entropy, mean over non-ignored rows."""
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    targets = targets.astype(int)
    keep = np.ones(len(targets), bool) if ignore_index is None else targets != ignore_index
    nll = -logp[np.arange(len(targets)), targets]
    smooth = -logp.mean(-1)  # eps / V * sum_c(-logp[c]) == eps * mean
    per_row = (1 - eps) * nll + eps * smooth
    return per_row[keep].sum() / keep.sum()


def sub(t, prefix):
    """Tensors under `prefix.` with the prefix removed."""
    n = len(prefix) + 1
    return {k[n:]: v for k, v in t.items() if k.startswith(prefix + ".")}


# ---------------------------------------------------------------------------
# Per-file checks
# ---------------------------------------------------------------------------

def check_structure(fname, t, prefix=""):
    """param.X <-> grad.X pairing, finiteness."""
    pre = prefix + "." if prefix else ""
    params = [k for k in t if k.startswith(pre + "param.")]
    for k in params:
        g = pre + "grad." + k[len(pre + "param."):]
        check(f"{fname}:{g} present", g in t and t[g].shape == t[k].shape)
    for k, v in t.items():
        if k.startswith(pre):
            check(f"{fname}:{k} finite", np.all(np.isfinite(v)))


def check_seq2seq(fname):
    t, meta = load(fname)
    check_structure(fname, t)
    p = sub(t, "param")
    d, h = int(meta["d_model"]), int(meta["heads"])
    pre, act = meta["norm_first"] == "true", act_fn(meta["activation"])
    tied = meta["tied"] == "true"
    for k in ("in.src", "in.src_lens", "in.tgt_in", "in.tgt_out", "in.tgt_lens",
              "out.logits", "out.loss", "out.enc", "param.lm_head.bias"):
        check(f"{fname}:{k} present", k in t)
    check(f"{fname}:lm_head.weight iff untied", ("param.lm_head.weight" in t) == (not tied))
    check(f"{fname}:final norms iff pre-LN", ("param.encoder.norm.weight" in t) == pre)

    src, tgt_in, tgt_out = t["in.src"].astype(int), t["in.tgt_in"].astype(int), t["in.tgt_out"]
    s_lens, t_lens = t["in.src_lens"].astype(int), t["in.tgt_lens"].astype(int)
    (b, s), T = src.shape, tgt_in.shape[1]
    src_mask = np.broadcast_to(pad_mask(s_lens, s)[:, None, :], (b, s, s))
    self_mask = pad_mask(t_lens, T)[:, None, :] | causal(T)[None]
    cross_mask = np.broadcast_to(pad_mask(s_lens, s)[:, None, :], (b, T, s))

    x = p["src_embed.weight"][src] * math.sqrt(d) + sinusoidal(s, d)
    for i in range(int(meta["enc_layers"])):
        x = encoder_layer(x, p, f"encoder.layers.{i}", h, src_mask, pre, act)
    if pre:
        x = layer_norm(x, p, "encoder.norm")
    close(f"{fname}:out.enc vs SPEC", x, t["out.enc"])

    y = p["tgt_embed.weight"][tgt_in] * math.sqrt(d) + sinusoidal(T, d)
    for i in range(int(meta["dec_layers"])):
        y = decoder_layer(y, x, p, f"decoder.layers.{i}", h, self_mask, cross_mask, pre, act)
    if pre:
        y = layer_norm(y, p, "decoder.norm")
    w = p["tgt_embed.weight"] if tied else p["lm_head.weight"]
    logits = y @ w.T + p["lm_head.bias"]
    close(f"{fname}:out.logits vs SPEC", logits, t["out.logits"])
    v = logits.shape[-1]
    loss = cross_entropy(logits.reshape(-1, v), tgt_out.reshape(-1), int(meta["pad_id"]),
                         float(meta["label_smoothing"]))
    close(f"{fname}:out.loss vs SPEC", [loss], t["out.loss"])
    check(f"{fname}:loss positive", t["out.loss"][0] > 0)


def check_gpt(fname):
    t, meta = load(fname)
    check_structure(fname, t)
    p = sub(t, "param")
    h = int(meta["heads"])
    check(f"{fname}:no lm_head (tied)", "param.lm_head.weight" not in t)
    ids, lens = t["in.ids"].astype(int), t["in.lens"].astype(int)
    b, T = ids.shape
    mask = pad_mask(lens, T)[:, None, :] | causal(T)[None]
    x = p["tok_embed.weight"][ids] + p["pos_embed.weight"][:T]
    for i in range(int(meta["layers"])):
        x = encoder_layer(x, p, f"layers.{i}", h, mask, True, act_fn(meta["activation"]))
    logits = layer_norm(x, p, "norm") @ p["tok_embed.weight"].T
    close(f"{fname}:out.logits vs SPEC", logits, t["out.logits"])
    loss = cross_entropy(logits.reshape(-1, logits.shape[-1]), t["in.targets"].reshape(-1), 0)
    close(f"{fname}:out.loss vs SPEC", [loss], t["out.loss"])
    # Unused learned positions (rows >= T) must get zero gradient.
    check(f"{fname}:pos_embed grad zero past T", np.all(t["grad.pos_embed.weight"][T:] == 0))


def check_layers(fname):
    t, meta = load(fname)
    for case in meta["cases"].split(","):
        check_structure(fname, t, case)
        check(f"{fname}:{case} has out and grad",
              any(k.startswith(case + ".out.") for k in t) and
              any(k.startswith(case + ".grad.") for k in t))

    c = sub(t, "ln")
    close("ln.out.y vs SPEC", layer_norm(c["in.x"], sub(c, "param"), ""), c["out.y"])

    c = sub(t, "mha_self")
    x, lens = c["in.x"], c["in.lens"].astype(int)
    T = x.shape[1]
    y, probs = mha(x, x, sub(c, "param"), "", int(meta["mha_self.heads"]),
                   pad_mask(lens, T)[:, None, :] | causal(T)[None])
    close("mha_self.out.y vs SPEC", y, c["out.y"])
    close("mha_self.out.attn vs SPEC", probs, c["out.attn"])

    c = sub(t, "mha_cross")
    xq, xkv, lens = c["in.xq"], c["in.xkv"], c["in.lens"].astype(int)
    mask = np.broadcast_to(pad_mask(lens, xkv.shape[1])[:, None, :],
                           (xq.shape[0], xq.shape[1], xkv.shape[1]))
    y, probs = mha(xq, xkv, sub(c, "param"), "", int(meta["mha_cross.heads"]), mask)
    close("mha_cross.out.y vs SPEC", y, c["out.y"])
    close("mha_cross.out.attn vs SPEC", probs, c["out.attn"])
    check("mha_cross.out.attn per head (B,H,T,S)", c["out.attn"].shape == (2, 2, 4, 6))

    for case, act in (("ffn_relu", "relu"), ("ffn_gelu", "gelu")):
        c = sub(t, case)
        close(f"{case}.out.y vs SPEC", ffn(c["in.x"], sub(c, "param"), "", act_fn(act)), c["out.y"])

    c = sub(t, "ce")
    close("ce.out.loss vs SPEC",
          [cross_entropy(c["in.logits"], c["in.targets"], 0, float(meta["ce.label_smoothing"]))],
          c["out.loss"])
    ignored = c["in.targets"] == 0
    check("ce ignored rows have zero grad", np.all(c["grad.logits"][ignored] == 0))
    c = sub(t, "ce_plain")
    close("ce_plain.out.loss vs SPEC", [cross_entropy(c["in.logits"], c["in.targets"])],
          c["out.loss"])


def check_adam(fname):
    """Re-derive every optimizer trajectory from the textbook update rules."""
    t, meta = load(fname)
    p0, gs = t["p0"], [t["g1"], t["g2"], t["g3"]]

    def adam(lr, b1, b2, eps, wd, decoupled):
        p, m, v, out = p0.copy(), 0 * p0, 0 * p0, []
        for k, g in enumerate(gs, start=1):
            if decoupled:
                p = p * (1 - lr * wd)          # AdamW: decay the weights directly
            else:
                g = g + wd * p                 # Adam: L2 term folded into the gradient
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            m_hat, v_hat = m / (1 - b1 ** k), v / (1 - b2 ** k)
            p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
            out.append(p)
        return out

    def sgd(lr, mom, wd, nesterov):
        p, buf, out = p0.copy(), None, []
        for g in gs:
            g = g + wd * p
            buf = g.copy() if buf is None else mom * buf + g  # dampening 0
            p = p - lr * (g + mom * buf if nesterov else buf)
            out.append(p)
        return out

    want = {
        "adam": adam(0.01, 0.9, 0.98, 1e-9, 0.0, False),
        "adam_l2": adam(0.01, 0.9, 0.98, 1e-9, 0.1, False),
        "adamw": adam(0.01, 0.9, 0.999, 1e-8, 0.1, True),
        "sgd_mom": sgd(0.1, 0.9, 0.0, False),
        "sgd_nesterov": sgd(0.1, 0.9, 0.01, True),
    }
    for key, traj in want.items():
        for k, p in enumerate(traj, start=1):
            close(f"{fname}:{key}.p{k} vs formula", p, t[f"{key}.p{k}"])


def check_attention_head_size(fname):
    """d_k != D / H: the plain-ops reference of every kernel, recomputed from SPEC."""
    t, meta = load(fname)
    h, d = int(meta["heads"]), int(meta["d_model"])
    window, every = int(meta["sparse.window"]), int(meta["sparse.global_every"])
    for case in meta["cases"].split(","):
        check_structure(fname, t, case)
        c, kernel, d_k = sub(t, case), meta[f"{case}.kernel"], int(meta[f"{case}.d_k"])
        p = sub(c, "param")
        check(f"{fname}:{case} w_q, w_k (H*d_k, D), w_v (D, D)",
              p["w_q.weight"].shape == (h * d_k, d) == p["w_k.weight"].shape
              and p["w_v.weight"].shape == (d, d) and d_k != d // h)
        check(f"{fname}:{case} biases iff bias",
              ("w_q.bias" in p) == (meta[f"{case}.bias"] == "true"))
        xq = c["in.xq"] if "in.xq" in c else c["in.x"]
        xkv = c["in.xkv"] if "in.xkv" in c else xq
        (b, T, _), S = xq.shape, xkv.shape[1]
        mask = np.zeros((b, T, S), bool)
        if "key_padding" in meta[f"{case}.mask"]:
            mask |= pad_mask(c["in.lens"].astype(int), S)[:, None, :]
        if "causal" in meta[f"{case}.mask"]:
            mask |= causal(T)[None]
        if kernel == "sparse":
            mask |= sparse_hidden(T, window, every)[None]
        if kernel == "linear":
            y = linear_mha(xq, xkv, p, h, mask)
        else:
            y, probs = mha(xq, xkv, p, "", h, mask)
            if kernel == "softmax":
                close(f"{fname}:{case}.out.attn vs SPEC", probs, c["out.attn"])
        close(f"{fname}:{case}.out.y vs SPEC", y, c["out.y"])


def check_attention_kernels(fname):
    """The sparse case: nn.MultiheadAttention with the pattern as its mask."""
    t, _ = load(fname)
    check_structure(fname, t, "mha_sparse")
    c = sub(t, "mha_sparse")
    x, T = c["in.x"], c["in.x"].shape[1]
    mask = pad_mask(c["in.lens"].astype(int), T)[:, None, :] | causal(T)[None]
    mask = mask | sparse_hidden(T, 3, 4)[None]  # window 3, a global position every 4
    y = mha(x, x, sub(c, "param"), "", 2, mask)[0]
    close(f"{fname}:mha_sparse.out.y vs SPEC", y, c["out.y"])


def main():
    sizes = {}
    for name in sorted(os.listdir(FIXTURES)):
        if name.endswith(".safetensors"):
            sizes[name] = os.path.getsize(os.path.join(FIXTURES, name))
            check(f"{name} under 200 KB", sizes[name] < 200_000)
    for name in ("seq2seq_postln.safetensors", "seq2seq_preln_tied.safetensors",
                 "gpt.safetensors", "layers.safetensors", "adam.safetensors",
                 "attention_kernels.safetensors", "attention_head_size.safetensors"):
        check(f"{name} exists", name in sizes)
    check_seq2seq("seq2seq_postln.safetensors")
    check_seq2seq("seq2seq_preln_tied.safetensors")
    check_gpt("gpt.safetensors")
    check_layers("layers.safetensors")
    check_adam("adam.safetensors")
    check_attention_kernels("attention_kernels.safetensors")
    check_attention_head_size("attention_head_size.safetensors")
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
