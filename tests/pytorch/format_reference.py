#!/usr/bin/python3
"""The models of docs/checkpoint-format.md in plain torch ops, from the page alone.

For each case of format_writer.py (one per family) this reads the model file
that the standard-library writer made, builds the forward pass the page's
"The forward pass" section describes (embedding scale, positions, norm
placement, masks, the attention kernels, the mixture of experts, the output
layer) out of plain torch ops in float64 (no nn.Transformer*, no qkv code), and
writes its logits on a fixed input to tests/fixtures/format_page.safetensors:

    <case>.in.ids, <case>.in.lens      the input (gpt, encoder), ids as F32
    <case>.in.pixels                   the input (vit): (B, C*H*W) pixel values 0..255 as F32
    <case>.in.src, <case>.in.src_lens, <case>.in.tgt, <case>.in.tgt_lens  (seq2seq)
    <case>.out.logits                  (B, T, V) (a bert classifier's (B, C), a bert qa's (B, 2, T), a vit's (B, classes)), float64 rounded to F32
    <case>.out.train_logits            a mixture of experts' (gpt_moe*): the logits of a training
                                       step's forward (a graph, training mode), where the capacity
                                       drops assignments; .out.logits are inference's, with none

tests/test_format_page.cpp loads the same model files with qkv and requires
its logits to be these. Run by make_fixtures.py (`make fixtures`), or alone:

    /usr/bin/python3 tests/pytorch/format_reference.py
"""

import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import format_writer  # noqa: E402  (the cases and the standard-library writer)
import st  # noqa: E402  (a safetensors reader)

OUT_DIR = os.path.normpath(os.path.join(HERE, "..", "fixtures"))
F64 = torch.float64

# The fixed inputs: real tokens are ids 3.. (the task's symbols), padding 0.
INPUTS = {
    "seq2seq": {"src": [[3, 4, 5, 6, 7, 8], [8, 6, 4, 3, 0, 0]], "src_lens": [6, 4],
                "tgt": [[1, 8, 7, 6, 5], [1, 3, 4, 0, 0]], "tgt_lens": [5, 3]},
    "gpt": {"ids": [[3, 5, 7, 1, 7, 5, 3], [4, 6, 1, 6, 4, 0, 0]], "lens": [7, 5]},
    "encoder": {"ids": [[3, 4, 5, 6, 7, 8, 3, 4, 5], [8, 7, 6, 5, 4, 3, 0, 0, 0]],
                "lens": [9, 6]},
    "seq2seq_preln": {"src": [[5, 6, 7, 8, 3], [4, 4, 8, 0, 0]], "src_lens": [5, 3],
                      "tgt": [[1, 3, 8, 7, 6, 5, 4, 3], [1, 8, 4, 4, 0, 0, 0, 0]],
                      "tgt_lens": [8, 4]},
    "gpt_tied": {"ids": [[3, 4, 5, 6, 7, 8, 1, 8, 7, 6, 5], [6, 5, 1, 5, 6, 2, 0, 0, 0, 0, 0]],
                 "lens": [11, 6]},
    "encoder_preln": {"ids": [[8, 3, 7, 4, 6], [5, 5, 3, 0, 0]], "lens": [5, 3]},
    "gpt_llama": {"ids": [[3, 4, 5, 6, 1, 6, 5, 4, 3], [8, 7, 1, 7, 8, 2, 0, 0, 0]], "lens": [9, 6]},
    "seq2seq_rms": {"src": [[3, 5, 7, 4, 6], [8, 8, 3, 0, 0]], "src_lens": [5, 3],
                    "tgt": [[1, 6, 4, 7, 5, 3], [1, 3, 8, 8, 0, 0]], "tgt_lens": [6, 4]},
    "seq2seq_relative": {"src": [[3, 4, 5, 6, 7, 8, 3], [8, 6, 4, 0, 0, 0, 0]], "src_lens": [7, 3],
                         "tgt": [[1, 8, 3, 7, 6, 5, 4, 3, 8], [1, 4, 6, 8, 0, 0, 0, 0, 0]],
                         "tgt_lens": [9, 4]},
    "gpt_gqa_rope": {"ids": [[3, 8, 4, 7, 5, 1, 5, 7, 4, 8, 3, 6], [6, 3, 1, 3, 6, 2, 0, 0, 0, 0, 0, 0]],
                     "lens": [12, 6]},
    # The mixtures: padded rows are rows of the batch too (a training step
    # would count them toward capacity; these logits are inference's).
    "gpt_moe": {"ids": [[3, 6, 8, 4, 1, 4, 8, 6, 3, 2], [7, 5, 1, 5, 7, 2, 0, 0, 0, 0]],
                "lens": [10, 6]},
    "gpt_moe_top1": {"ids": [[5, 3, 8, 1, 8, 3, 5], [4, 1, 4, 2, 0, 0, 0]], "lens": [7, 4]},
    # bert: "<s> A </s> B </s>" (two segments), "<s> A </s>" padded
    "bert_mlm": {"ids": [[1, 3, 4, 5, 2, 6, 7, 8, 2], [1, 8, 3, 6, 2, 0, 0, 0, 0]], "lens": [9, 5]},
    "bert_classify": {"ids": [[1, 5, 3, 2, 8, 4, 2], [1, 7, 2, 0, 0, 0, 0], [1, 4, 2, 3, 2, 0, 0]],
                      "lens": [7, 3, 5]},
    # bert qa: "<s> question </s> context </s>", and one padded
    "bert_qa": {"ids": [[1, 4, 5, 2, 6, 7, 8, 3, 2], [1, 8, 2, 4, 6, 2, 0, 0, 0]], "lens": [9, 6]},
    # Two images of 2 x 6 x 6 pixel values 0..255 (channel, row, column order).
    "vit": {"pixels": [[(37 * k + 11 * b) % 256 for k in range(72)] for b in range(2)]},
    # Two gray 6 x 6 images (row, column order).
    "vit_gray": {"pixels": [[(53 * k + 29 * b + 7) % 256 for k in range(36)] for b in range(2)]},
}


# ---------------------------------------------------------------------------
# The page's building blocks
# ---------------------------------------------------------------------------

def lin(x, w, b=None):
    """y = x W^T + b, W (out, in) as stored."""
    y = x @ w.T
    return y if b is None else y + b


def layer_norm(x, g, b):
    """(x - mean) / sqrt(var + 1e-5) * g + b over the last dimension, biased variance."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * g + b


def rms_norm(x, g):
    """x / sqrt(mean(x^2) + 1e-6) * g over the last dimension (norm "rms")."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * g


def sinusoidal(n, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same)."""
    pe = torch.zeros(n, d, dtype=F64)
    for pos in range(n):
        for j in range(d):
            angle = pos / 10000.0 ** ((j - j % 2) / d)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def hidden(T, S, lens, causal, sparse):
    """(B, T, S) bool: True where query i may not see key j of sequence b."""
    i = torch.arange(T)[:, None]
    j = torch.arange(S)[None, :]
    h = (j >= torch.tensor(lens)[:, None, None])  # key padding
    if causal:
        h = h | (j > i)
    if sparse is not None:
        w, g = sparse
        seen = ((i - j).abs() < w) | (j % g == 0) | (i % g == 0)
        h = h | ~seen
    return h


def rope(x, base):
    """The page's rotary positions: x (B, heads, T, d_k), pair (2i, 2i+1) of
    each head at row t turned by the angle t * base^(-2i/d_k)."""
    T, dk = x.shape[-2], x.shape[-1]
    i = torch.arange(dk // 2, dtype=F64)
    a = torch.arange(T, dtype=F64)[:, None] * base ** (-2.0 * i / dk)  # (T, d_k/2)
    x0, x1 = x[..., 0::2], x[..., 1::2]  # (B, heads, T, d_k/2)
    y = torch.empty_like(x)
    y[..., 0::2] = x0 * torch.cos(a) - x1 * torch.sin(a)
    y[..., 1::2] = x0 * torch.sin(a) + x1 * torch.cos(a)
    return y


def relative_bias(table, T, S, bidirectional, M):
    """The page's relative bias (heads, T, S): table[h, bucket(j - i)], for a
    bidirectional table n = |j - i| and nb/2 buckets per side (a later key
    adds nb/2), for a causal one n = max(i - j, 0) and all nb; of a side's b
    buckets, n < b/2 is bucket n, beyond it b/2 + floor(ln(n / (b/2)) /
    ln(M / (b/2)) * (b - b/2)), at most b - 1."""
    nb = table.shape[1]
    out = torch.empty(table.shape[0], T, S, dtype=table.dtype)
    for i in range(T):
        for j in range(S):
            b = nb // 2 if bidirectional else nb
            n = abs(j - i) if bidirectional else max(i - j, 0)
            base = b if bidirectional and j > i else 0
            e = b // 2
            k = n if n < e else min(b - 1, e + int(math.log(n / e) / math.log(M / e) * (b - e)))
            out[:, i, j] = table[:, base + k]
    return out


def attention(P, prefix, xq, xkv, lens, causal, c, kernel, self_attention=True, table=None):
    """The page's multi-head attention: heads of d_k query/key columns and
    d_model / heads value columns; kernel standard, sparse or linear. In
    self-attention kv_heads K key/value heads serve heads / K query heads
    each, and rope_base rotates the heads of Q and K."""
    B, T, D = xq.shape
    S = xkv.shape[1]
    H = c["heads"]
    Hkv = c.get("kv_heads", H) if self_attention else H
    dk = c.get("d_k", D // H)
    dv = D // H
    # Without biases (bias false) the files hold none: P.get gives None.
    q = lin(xq, P[prefix + ".w_q.weight"], P.get(prefix + ".w_q.bias"))  # (B, T, H*dk)
    k = lin(xkv, P[prefix + ".w_k.weight"], P.get(prefix + ".w_k.bias"))  # (B, S, Hkv*dk)
    v = lin(xkv, P[prefix + ".w_v.weight"], P.get(prefix + ".w_v.bias"))  # (B, S, Hkv*dv)
    q = q.view(B, T, H, dk).transpose(1, 2)
    k = k.view(B, S, Hkv, dk).transpose(1, 2)
    v = v.view(B, S, Hkv, dv).transpose(1, 2)
    if self_attention and "rope_base" in c:
        q, k = rope(q, c["rope_base"]), rope(k, c["rope_base"])
    # query head h reads key/value head h // (H / Hkv)
    k = k.repeat_interleave(H // Hkv, dim=1)  # (B, H, S, dk)
    v = v.repeat_interleave(H // Hkv, dim=1)  # (B, H, S, dv)
    if kernel == "linear":
        phi = lambda x: torch.where(x > 0, x + 1, torch.exp(x))  # elu + 1
        qf, kf = phi(q), phi(k)
        pad = (torch.arange(S)[None, :] >= torch.tensor(lens)[:, None])  # (B, S)
        kf = kf.masked_fill(pad[:, None, :, None], 0.0)
        a = qf @ kf.transpose(-1, -2)  # (B, H, T, S): phi(q_i) . phi(k_j)
        if causal:
            a = a.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), 0.0)
        o = (a @ v) / a.sum(-1, keepdim=True)
    else:
        scale = 1.0 / math.sqrt(dk) if c["scaled"] else 1.0
        s = (q @ k.transpose(-1, -2)) * scale  # (B, H, T, S)
        if table is not None:  # rel_buckets: the stack's table, in self-attention
            s = s + relative_bias(P[table], T, S, not causal, c["rel_max_distance"])
        sparse = (c["window"], c["global_every"]) if kernel == "sparse" else None
        s = s.masked_fill(hidden(T, S, lens, causal, sparse)[:, None], float("-inf"))
        o = torch.softmax(s, -1) @ v
    o = o.transpose(1, 2).reshape(B, T, D)
    return lin(o, P[prefix + ".w_o.weight"], P.get(prefix + ".w_o.bias"))


def ffn(P, prefix, x, c, training=False):
    """The feed-forward block, or with `experts` the page's mixture of experts."""
    if "experts" in c:
        return moe(P, prefix, x, c, training)
    return dense_ffn(P, prefix, x, c)


# The smallest gap between a token's k-th and (k+1)-th router probability
# seen by moe() (float32 must route as float64 does: see make()).
MOE_GAP = [float("inf")]


def moe(P, prefix, x, c, training=False):
    """The page's mixture of experts over the N rows of x (padding included):
    P_n = softmax(x_n router^T), no bias; C_n = the k largest, ties to the
    lower index; gates renormalised over C_n for k >= 2, the raw P for k = 1;
    y_n = sum over kept e in C_n of g_ne expert_e(x_n). At inference every
    assignment is kept. In a training step (training=True: a graph recorded,
    the model in training mode) each expert keeps at most
    ceil(capacity_factor * N * k / E) assignments, claimed by every row's first
    choice in row order, then every second choice, ...; the others are
    dropped and the gates are not renormalised again."""
    E, k = c["experts"], c["experts_per_token"]
    D = x.shape[-1]
    xs = x.reshape(-1, D)  # (N, D)
    N = xs.shape[0]
    p = torch.softmax(lin(xs, P[prefix + ".router.weight"]), -1)  # (N, E)
    chosen = [sorted(range(E), key=lambda e: (-float(p[n, e]), e))[:k] for n in range(N)]
    for n in range(N):
        if k < E:
            top = sorted((float(v) for v in p[n]), reverse=True)
            MOE_GAP[0] = min(MOE_GAP[0], top[k - 1] - top[k])
    idx = torch.tensor(chosen)  # (N, k), rank 0 the largest
    sel = p.gather(1, idx)  # (N, k)
    g = sel / sel.sum(-1, keepdim=True) if k >= 2 else sel
    kept = torch.ones(N, k, dtype=p.dtype)
    if training:
        capacity = math.ceil(c["capacity_factor"] * N * k / E)
        used = [0] * E
        for r in range(k):
            for n in range(N):
                e = chosen[n][r]
                if used[e] < capacity:
                    used[e] += 1
                else:
                    kept[n, r] = 0.0
    y = torch.zeros_like(xs)
    for e in range(E):
        w = ((idx == e).to(p.dtype) * g * kept).sum(-1, keepdim=True)  # (N, 1): e's gate, or 0
        y = y + w * dense_ffn(P, f"{prefix}.experts.{e}", xs, c)
    return y.reshape(x.shape)


def dense_ffn(P, prefix, x, c):
    if c["activation"] == "swiglu":  # (silu(x gate^T) * (x up^T)) down^T
        a = lin(x, P[prefix + ".gate.weight"])
        u = lin(x, P[prefix + ".up.weight"])
        return lin(a * torch.sigmoid(a) * u, P[prefix + ".down.weight"])
    h = lin(x, P[prefix + ".linear1.weight"], P.get(prefix + ".linear1.bias"))
    if c["activation"] == "relu":
        h = torch.relu(h)
    else:
        h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))  # exact GELU
    return lin(h, P[prefix + ".linear2.weight"], P.get(prefix + ".linear2.bias"))


def norm_of(P, name, x, c):
    """The norm `name` of the config's kind: LayerNorm, or RMSNorm with norm "rms"."""
    if c.get("norm", "layer") == "rms":
        return rms_norm(x, P[name + ".weight"])
    return layer_norm(x, P[name + ".weight"], P[name + ".bias"])


def sublayer(P, norm, x, f, c):
    """Post-LN: norm(x + f(x)); Pre-LN: x + f(norm(x))."""
    return x + f(norm_of(P, norm, x, c)) if c["pre_norm"] else norm_of(P, norm, x + f(x), c)


def encoder_layer(P, p, x, lens, causal, c, table=None, training=False):
    kernel = c["attention"]
    x = sublayer(P, p + ".norm1", x,
                 lambda v: attention(P, p + ".self_attn", v, v, lens, causal, c, kernel,
                                     table=table),
                 c)
    return sublayer(P, p + ".norm2", x, lambda v: ffn(P, p + ".ffn", v, c, training), c)


def decoder_layer(P, p, y, mem, tgt_lens, src_lens, c, table=None):
    # Cross-attention runs the standard maths unless the kernel is
    # memory-efficient or auto (the same maths): sparse and linear are
    # self-attention's only.
    y = sublayer(P, p + ".norm1", y,
                 lambda v: attention(P, p + ".self_attn", v, v, tgt_lens, True, c, c["attention"],
                                     table=table),
                 c)
    y = sublayer(P, p + ".norm2", y,
                 lambda v: attention(P, p + ".cross_attn", v, mem, src_lens, False, c, "standard", False),
                 c)
    return sublayer(P, p + ".norm3", y, lambda v: ffn(P, p + ".ffn", v, c), c)


def final_norm(P, name, x, c):
    return norm_of(P, name, x, c) if c["pre_norm"] else x


# ---------------------------------------------------------------------------
# The families
# ---------------------------------------------------------------------------

def seq2seq(P, c, x):
    D = c["d_model"]
    src, tgt = torch.tensor(x["src"]), torch.tensor(x["tgt"])
    S, T = src.shape[1], tgt.shape[1]

    rel = "rel_buckets" in c  # no positions added: the stacks' tables say where

    def positions(n, table):
        if rel:
            return 0.0
        return P[table][:n] if c["learned_positions"] else sinusoidal(n, D)

    h = P["src_embed.weight"][src] * math.sqrt(D) + positions(S, "src_pos.weight")
    for i in range(c["encoder_layers"]):
        h = encoder_layer(P, f"encoder.layers.{i}", h, x["src_lens"], False, c,
                          "encoder.rel_bias" if rel else None)
    mem = final_norm(P, "encoder.norm", h, c)
    y = P["tgt_embed.weight"][tgt] * math.sqrt(D) + positions(T, "tgt_pos.weight")
    for i in range(c["decoder_layers"]):
        y = decoder_layer(P, f"decoder.layers.{i}", y, mem, x["tgt_lens"], x["src_lens"], c,
                          "decoder.rel_bias" if rel else None)
    y = final_norm(P, "decoder.norm", y, c)
    w = P["tgt_embed.weight"] if c["tie_weights"] else P["lm_head.weight"]
    return lin(y, w, P["lm_head.bias"])


def gpt(P, c, x, training=False):
    """training: the forward of a training step (a mixture's capacity applies;
    dropout, 0 in these cases, is left out)."""
    ids = torch.tensor(x["ids"])
    h = P["tok_embed.weight"][ids]  # no scale
    if "rope_base" not in c:  # rotary positions: no table, attention rotates Q and K
        h = h + P["pos_embed.weight"][: ids.shape[1]]
    for i in range(c["layers"]):
        h = encoder_layer(P, f"layers.{i}", h, x["lens"], True, c, training=training)
    h = final_norm(P, "norm", h, c)
    return lin(h, P["tok_embed.weight"] if c["tie_weights"] else P["lm_head.weight"])


def encoder(P, c, x):
    ids = torch.tensor(x["ids"])
    D = c["d_model"]
    h = P["embed.weight"][ids] * math.sqrt(D) + sinusoidal(ids.shape[1], D)
    for i in range(c["layers"]):
        h = encoder_layer(P, f"encoder.layers.{i}", h, x["lens"], False, c)
    h = final_norm(P, "encoder.norm", h, c)
    return lin(h, P["head.weight"], P["head.bias"])


def bert(P, c, x):
    ids = torch.tensor(x["ids"])
    B, T = ids.shape
    # segment 0 up to and including the first sep_id, 1 after (at most
    # segments - 1), 0 at padding
    seg = torch.zeros_like(ids)
    for b in range(B):
        s = 0
        for i in range(x["lens"][b]):
            seg[b, i] = min(s, c.get("segments", 2) - 1)
            if ids[b, i] == c.get("sep_id", 2):
                s = 1
    h = P["embed.weight"][ids] + P["segment_embed.weight"][seg] + P["pos_embed.weight"][:T]
    h = norm_of(P, "embed_norm", h, c)
    for i in range(c["layers"]):
        h = encoder_layer(P, f"encoder.layers.{i}", h, x["lens"], False, c)
    h = final_norm(P, "encoder.norm", h, c)
    if c["head"] == "mlm":
        u = lin(h, P["mlm.dense.weight"], P["mlm.dense.bias"])
        u = 0.5 * u * (1.0 + torch.erf(u / math.sqrt(2.0)))  # exact GELU
        u = norm_of(P, "mlm.norm", u, c)
        return lin(u, P["embed.weight"], P["mlm.bias"])  # (B, T, V)
    if c["head"] == "qa":  # (B, 2, T): start and end rows, -1e9 where no span may start or end
        z = lin(h, P["qa_outputs.weight"], P["qa_outputs.bias"]).transpose(1, 2)
        allowed = torch.zeros(B, T, dtype=torch.bool)
        for b in range(B):
            allowed[b, 0] = True
            for i in range(1, x["lens"][b] - 1):
                allowed[b, i] = bool(seg[b, i] != 0)
        return z.masked_fill(~allowed[:, None, :], -1e9)
    z = torch.tanh(lin(h[:, 0], P["pooler.weight"], P["pooler.bias"]))
    return lin(z, P["classifier.weight"], P["classifier.bias"])  # (B, C)


def vit(P, c, x):
    pixels = torch.tensor(x["pixels"], dtype=F64)
    B, C, H, p = pixels.shape[0], c["channels"], c["image"], c["patch"]
    img = (pixels / 255).reshape(B, C, H, H)
    # patch n = gy * (H/p) + gx, its pixels in (c, py, px) order
    g = H // p
    patches = img.reshape(B, C, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(B, g * g, C * p * p)
    h = lin(patches, P["patch.weight"], P["patch.bias"])
    h = torch.cat([P["cls_token"].expand(B, 1, -1), h], 1) + P["pos_embed"]
    for i in range(c["layers"]):
        h = encoder_layer(P, f"encoder.layers.{i}", h, [g * g + 1] * B, False, c)  # no padding
    h = final_norm(P, "encoder.norm", h, c)
    return lin(h[:, 0], P["head.weight"], P["head.bias"])  # (B, classes)


FORWARD = {"seq2seq": seq2seq, "gpt": gpt, "encoder": encoder, "bert": bert, "vit": vit}


def make(model_dir=OUT_DIR, out_dir=OUT_DIR):
    """Logits of every case's model file in model_dir, into out_dir/format_page.safetensors."""
    import numpy as np

    out = {}
    for name, case in format_writer.CASES.items():
        tensors, md = st.load_file(os.path.join(model_dir, f"format_{name}.safetensors"))
        assert md["model_kind"] == case["kind"]
        c = json.loads(md["model_config"])
        P = {n: torch.from_numpy(t.astype(np.float64)) for n, t in tensors.items()}
        x = INPUTS[name]
        MOE_GAP[0] = float("inf")
        with torch.no_grad():
            logits = FORWARD[case["kind"]](P, c, x)
            # A mixture's training step drops assignments past capacity: its
            # logits too (a gpt's; dropout is 0).
            train_logits = gpt(P, c, x, training=True) if "experts" in c else None
        # A mixture's choice of experts is a step function of the router's
        # probabilities: qkv's float32 must choose what float64 chose here,
        # so the k-th and (k+1)-th probabilities of every row differ by far
        # more than float32's error in them (about 1e-6 here).
        assert MOE_GAP[0] > 1e-4, f"{name}: a near-tie in the router ({MOE_GAP[0]:.1e}): draw anew"
        for k, v in x.items():
            out[f"{name}.in.{k}"] = np.asarray(v, dtype=np.float32)
        out[f"{name}.out.logits"] = logits.numpy().astype(np.float32)
        if train_logits is not None:
            assert (train_logits - logits).abs().max() > 1e-3, f"{name}: no assignment dropped"
            out[f"{name}.out.train_logits"] = train_logits.numpy().astype(np.float32)
    st.save_file(out, os.path.join(out_dir, "format_page.safetensors"), {
        "generator": "tests/pytorch/format_reference.py",
        "torch_version": torch.__version__,
        "reference_dtype": "float64",
        "models": "tests/fixtures/format_<case>.safetensors (tests/pytorch/format_writer.py)",
    })


def main():
    # The model files first, by the standard-library writer (their checkpoints
    # are written at test time, by tests/cli/format_page.sh).
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        format_writer.main(["format_writer.py", tmp])
        for name in format_writer.CASES:
            os.replace(os.path.join(tmp, f"format_{name}.safetensors"),
                       os.path.join(OUT_DIR, f"format_{name}.safetensors"))
    make()


if __name__ == "__main__":
    main()
