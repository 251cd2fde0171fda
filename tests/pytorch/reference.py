"""qkv's models built from PyTorch's own layers, and the map from qkv
parameter names onto them: the one PyTorch definition of qkv that both the
fixtures (make_fixtures.py, in float64) and the benchmark (bench/bench_torch.py,
in float32) use.

Modules and tables are made in torch's default dtype at the time they are
built; make_fixtures.py sets float64 before building anything.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def join(prefix, name):
    """Dotted parameter name; an empty prefix gives the bare name."""
    return f"{prefix}.{name}" if prefix else name


# ---------------------------------------------------------------------------
# qkv name <-> PyTorch parameter mapping
# ---------------------------------------------------------------------------

class Binding:
    """Maps each qkv parameter name onto (a row range of) a PyTorch parameter.

    load() copies qkv values into the module, grads() reads the gradients back
    under qkv names. check_covers() asserts that every parameter of the module
    is bound exactly once, so nothing is silently left at PyTorch's init.
    """

    def __init__(self):
        self.items = []  # (qkv_name, torch_parameter, row_slice)

    def add(self, name, param, rows=slice(None)):
        self.items.append((name, param, rows))

    def names(self):
        return [name for name, _, _ in self.items]

    def load(self, values):
        assert sorted(values) == sorted(self.names()), (
            "qkv parameters and bound PyTorch parameters differ: "
            f"{sorted(set(values) ^ set(self.names()))}")
        with torch.no_grad():
            for name, param, rows in self.items:
                assert param[rows].shape == values[name].shape, name
                param[rows] = values[name]

    def grads(self):
        return {name: param.grad[rows].detach().clone() for name, param, rows in self.items}

    def check_covers(self, module):
        bound = {}
        for _, param, rows in self.items:
            bound[id(param)] = bound.get(id(param), 0) + param[rows].numel()
        for pname, param in module.named_parameters():
            assert bound.get(id(param)) == param.numel(), f"{pname} not fully bound"

    # --- mappings for PyTorch building blocks ---

    def linear(self, prefix, lin):
        self.add(join(prefix, "weight"), lin.weight)
        if lin.bias is not None:
            self.add(join(prefix, "bias"), lin.bias)

    def layer_norm(self, prefix, ln):
        # nn.LayerNorm, or RMSNorm (below), which has a gain and no bias.
        self.add(join(prefix, "weight"), ln.weight)
        if getattr(ln, "bias", None) is not None:
            self.add(join(prefix, "bias"), ln.bias)

    def mha(self, prefix, mha):
        # PyTorch packs the three input projections: in_proj_weight = cat(Wq, Wk, Wv)
        # along rows, in_proj_bias = cat(bq, bk, bv) (None without biases);
        # out_proj is qkv's w_o.
        d = mha.embed_dim
        for i, w in enumerate(("w_q", "w_k", "w_v")):
            rows = slice(i * d, (i + 1) * d)
            self.add(join(prefix, w + ".weight"), mha.in_proj_weight, rows)
            if mha.in_proj_bias is not None:
                self.add(join(prefix, w + ".bias"), mha.in_proj_bias, rows)
        self.linear(join(prefix, "w_o"), mha.out_proj)

    def block_layer(self, prefix, layer):
        # BlockLayer (below): qkv's names as they are.
        if isinstance(layer.self_attn, GroupedRopeAttention):  # w_q, w_k, w_v, w_o as they are
            for w in ("w_q", "w_k", "w_v", "w_o"):
                self.linear(join(prefix, "self_attn." + w), getattr(layer.self_attn, w))
        else:
            self.mha(join(prefix, "self_attn"), layer.self_attn)
        self.layer_norm(join(prefix, "norm1"), layer.norm1)
        for name, lin in layer.ffn.named_modules():  # with experts: router, experts.3.linear1 ...
            if isinstance(lin, nn.Linear):
                self.linear(join(prefix, "ffn." + name), lin)
        self.layer_norm(join(prefix, "norm2"), layer.norm2)

    def encoder_layer(self, prefix, layer):
        # nn.TransformerEncoderLayer keeps linear1/linear2 on the layer itself;
        # qkv groups them under "ffn".
        self.mha(join(prefix, "self_attn"), layer.self_attn)
        self.layer_norm(join(prefix, "norm1"), layer.norm1)
        self.linear(join(prefix, "ffn.linear1"), layer.linear1)
        self.linear(join(prefix, "ffn.linear2"), layer.linear2)
        self.layer_norm(join(prefix, "norm2"), layer.norm2)

    def decoder_block_layer(self, prefix, layer):
        # DecoderBlockLayer (below): qkv's names as they are.
        for w in ("w_q", "w_k", "w_v", "w_o"):
            self.linear(join(prefix, "self_attn." + w), getattr(layer.self_attn, w))
        self.layer_norm(join(prefix, "norm1"), layer.norm1)
        self.mha(join(prefix, "cross_attn"), layer.cross_attn)
        self.layer_norm(join(prefix, "norm2"), layer.norm2)
        for name, lin in layer.ffn.named_modules():
            if isinstance(lin, nn.Linear):
                self.linear(join(prefix, "ffn." + name), lin)
        self.layer_norm(join(prefix, "norm3"), layer.norm3)

    def decoder_layer(self, prefix, layer):
        # PyTorch calls the cross attention "multihead_attn".
        self.mha(join(prefix, "self_attn"), layer.self_attn)
        self.layer_norm(join(prefix, "norm1"), layer.norm1)
        self.mha(join(prefix, "cross_attn"), layer.multihead_attn)
        self.layer_norm(join(prefix, "norm2"), layer.norm2)
        self.linear(join(prefix, "ffn.linear1"), layer.linear1)
        self.linear(join(prefix, "ffn.linear2"), layer.linear2)
        self.layer_norm(join(prefix, "norm3"), layer.norm3)


# ---------------------------------------------------------------------------
# Masks and positions
# ---------------------------------------------------------------------------

def key_padding_mask(lens, n):
    """(B, n) bool, True = padded key (PyTorch convention): key j masked when j >= len[b].
    None for lens None (no padding)."""
    if lens is None:
        return None
    return torch.arange(n)[None, :] >= torch.as_tensor(lens)[:, None]


def causal_mask(t):
    """(t, t) bool, True = masked: query i may not see key j > i."""
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)


def sinusoidal(n, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same); (n, d),
    computed in float64 and returned in the default dtype."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d, 2, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(10000.0, two_i / d)
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.to(torch.get_default_dtype())


# ---------------------------------------------------------------------------
# The blocks PyTorch 1.13 has no module for, from plain torch ops
# ---------------------------------------------------------------------------

def swiglu_hidden(d_ff):
    """nn::swiglu_hidden: int(2 d_ff / 3) rounded up to a multiple of 8."""
    return (max(2 * d_ff // 3, 1) + 7) // 8 * 8


class RMSNorm(nn.Module):
    """model_config norm "rms": x * rsqrt(mean(x^2) + eps) * weight over the
    last dimension, no bias (Zhang and Sennrich; qkv's eps 1e-6)."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


class FeedForward(nn.Module):
    """The paper's block, linear2(act(linear1(x))), with or without biases."""

    def __init__(self, d, f, activation, bias):
        super().__init__()
        self.linear1 = nn.Linear(d, f, bias=bias)
        self.linear2 = nn.Linear(f, d, bias=bias)
        self.act = {"relu": F.relu, "gelu": F.gelu}[activation]  # exact erf GELU

    def forward(self, x):
        return self.linear2(self.act(self.linear1(x)))


class SwiGLU(nn.Module):
    """model_config activation "swiglu": (silu(x Wg^T) * (x Wu^T)) Wd^T, hidden
    width swiglu_hidden(d_ff), never with biases."""

    def __init__(self, d, d_ff):
        super().__init__()
        f = swiglu_hidden(d_ff)
        self.gate = nn.Linear(d, f, bias=False)
        self.up = nn.Linear(d, f, bias=False)
        self.down = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return (F.silu(x @ self.gate.weight.T) * (x @ self.up.weight.T)) @ self.down.weight.T


class MoE(nn.Module):
    """model_config experts E (nn/moe.h): E experts (FeedForward or SwiGLU)
    and a router Linear(d, E) without bias, in plain torch ops. P =
    softmax(x Wr^T); each token's top k (ties to the lower index); gates P /
    (sum of the chosen P) for k >= 2, P for k = 1; capacity ceil(cf N k / E)
    per forward (N the rows of x), claimed by rank then token; a dropped
    assignment adds nothing. self.aux after a forward: E sum_e f_e mean_n P_ne,
    f_e the share of the N k assignments the router chose for e."""

    def __init__(self, d, d_ff, activation, bias, experts, k, capacity_factor):
        super().__init__()
        self.router = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList([
            SwiGLU(d, d_ff) if activation == "swiglu" else FeedForward(d, d_ff, activation, bias)
            for _ in range(experts)])
        self.k, self.cf = k, capacity_factor
        self.aux = None

    def forward(self, x):
        d = x.shape[-1]
        xs = x.reshape(-1, d)
        n, e_count, k = xs.shape[0], len(self.experts), self.k
        p = torch.softmax(xs @ self.router.weight.T, dim=-1)
        order = torch.sort(-p.detach(), dim=-1, stable=True).indices[:, :k]
        chosen = torch.zeros_like(p).scatter_(1, order, 1.0)
        capacity = math.ceil(self.cf * n * k / e_count)
        kept = torch.zeros_like(p)
        used = [0] * e_count
        for r in range(k):
            for t in range(n):
                e = int(order[t, r])
                if used[e] < capacity:
                    used[e] += 1
                    kept[t, e] = 1.0
        pc = p * chosen
        gates = (pc if k == 1 else pc / pc.sum(dim=-1, keepdim=True)) * kept
        y = torch.zeros_like(xs)
        for e, expert in enumerate(self.experts):
            y = y + gates[:, e:e + 1] * expert(xs)
        self.aux = e_count * ((chosen.sum(dim=0) / (n * k)) * p.mean(dim=0)).sum()
        return y.reshape(x.shape)


def make_ffn(d, d_ff, activation, bias, moe=None):
    """A layer's FFN: MoE when moe = (experts, k, capacity_factor), else the dense block."""
    if moe:
        return MoE(d, d_ff, activation, bias, *moe)
    return SwiGLU(d, d_ff) if activation == "swiglu" else FeedForward(d, d_ff, activation, bias)


def moe_of(cfg):
    """(experts, experts_per_token, capacity_factor) of a model_config, or None."""
    if not cfg.get("experts", 0):
        return None
    return (cfg["experts"], cfg["experts_per_token"], cfg["capacity_factor"])


def rope(x, base):
    """model_config rope_base: rotary positions (nn/rope.h), x (B, heads, T,
    d_k): pair (2i, 2i+1) of each head at position t turned by the angle
    t * base^(-2i / d_k), as Meta's Llama pairs adjacent numbers:
      y_2i = x_2i cos - x_2i+1 sin,   y_2i+1 = x_2i sin + x_2i+1 cos.
    The angles in float64, the rotation in x's dtype."""
    t, dk = x.shape[-2], x.shape[-1]
    i = torch.arange(dk // 2, dtype=torch.float64)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * base ** (-2.0 * i / dk)  # (T, d_k/2)
    c, s = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]  # (B, heads, T, d_k/2)
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)  # re-interleave


def relative_position_bucket(rel, bidirectional, num_buckets, max_distance):
    """model_config rel_buckets, rel_max_distance: T5's buckets (Raffel et al.
    2020), Hugging Face's T5Attention._relative_position_bucket in float64:
    rel = key - query (a long tensor). Bidirectional: half the buckets per
    sign, n = |rel|; causal: n = max(-rel, 0). Of a direction's nb buckets,
    n < nb/2 exact; beyond, nb/2 + floor(log(n / (nb/2)) / log(max_distance /
    (nb/2)) * (nb - nb/2)), at most nb - 1."""
    ret = torch.zeros_like(rel)
    nb = num_buckets
    if bidirectional:
        nb //= 2
        ret = ret + (rel > 0).long() * nb
        n = rel.abs()
    else:
        n = -torch.min(rel, torch.zeros_like(rel))
    exact = nb // 2
    is_small = n < exact
    large = exact + (torch.log(n.double().clamp(min=1) / exact) / math.log(max_distance / exact)
                     * (nb - exact)).long()
    large = torch.min(large, torch.full_like(large, nb - 1))
    return ret + torch.where(is_small, n, large)


def relative_bias(table, T, S, pos0, bidirectional, max_distance):
    """T5's bias (1, H, T, S) of score (i, j): table[h, bucket(j - i - pos0)]."""
    rel = torch.arange(S)[None, :] - torch.arange(T)[:, None] - pos0  # (T, S)
    buckets = relative_position_bucket(rel, bidirectional, table.shape[1], max_distance)
    return table[:, buckets][None]  # (H, T, S) -> (1, H, T, S)


class GroupedRopeAttention(nn.Module):
    """Self-attention with the model_config keys nn.MultiheadAttention lacks,
    from plain torch ops: kv_heads K (grouped-query attention: W_K (K d_k, D),
    W_V (K d_v, D), d_v = D / H; query head h reads key/value head
    h // (H / K), i.e. repeat_interleave of the K heads) and rope_base
    (rotary positions on every head of Q and K, rope() above; 0: none).
    Masks as nn.MultiheadAttention takes them (True = hidden)."""

    def __init__(self, d, h, kv_heads, rope_base, bias):
        super().__init__()
        self.h, self.k, self.base = h, kv_heads, rope_base
        self.dk = d // h
        self.w_q = nn.Linear(d, d, bias=bias)
        self.w_k = nn.Linear(d, kv_heads * self.dk, bias=bias)
        self.w_v = nn.Linear(d, kv_heads * self.dk, bias=bias)
        self.w_o = nn.Linear(d, d, bias=bias)

    def forward(self, x, mask, pad, score_bias=None):
        B, T, D = x.shape
        q = self.w_q(x).view(B, T, self.h, self.dk).transpose(1, 2)  # (B, H, T, d_k)
        k = self.w_k(x).view(B, T, self.k, self.dk).transpose(1, 2)  # (B, K, T, d_k)
        v = self.w_v(x).view(B, T, self.k, self.dk).transpose(1, 2)  # (B, K, T, d_v)
        if self.base:
            q, k = rope(q, self.base), rope(k, self.base)
        k = k.repeat_interleave(self.h // self.k, dim=1)  # (B, H, T, d_k)
        v = v.repeat_interleave(self.h // self.k, dim=1)  # (B, H, T, d_v)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.dk)  # (B, H, T, T)
        if score_bias is not None:  # T5's relative bias (1, H, T, T), before the mask
            s = s + score_bias
        hidden = torch.zeros(B, 1, T, T, dtype=torch.bool)
        if mask is not None:
            hidden = hidden | mask[None, None]
        if pad is not None:
            hidden = hidden | pad[:, None, None, :]
        o = torch.softmax(s.masked_fill(hidden, float("-inf")), -1) @ v  # (B, H, T, d_v)
        return self.w_o(o.transpose(1, 2).reshape(B, T, D))


class BlockLayer(nn.Module):
    """An encoder layer built from a qkv model_config's block keys: `norm`
    ("layer" or "rms"), `activation` ("relu", "gelu" or "swiglu"), `bias`,
    `pre_norm`. Self-attention is nn.MultiheadAttention (bias=bias); the
    sublayers are wired as docs/checkpoint-format.md says:
      Post-LN  x = norm1(x + attn(x));  x = norm2(x + ffn(x))
      Pre-LN   x = x + attn(norm1(x));  x = x + ffn(norm2(x))"""

    def __init__(self, d, h, d_ff, activation, pre_norm, norm, bias, kv_heads=0, rope_base=0,
                 relative=False, moe=None):
        super().__init__()
        make_norm = {"layer": nn.LayerNorm, "rms": RMSNorm}[norm]
        if kv_heads or rope_base or relative:  # the attention keys: GroupedRopeAttention
            self.self_attn = GroupedRopeAttention(d, h, kv_heads or h, rope_base, bias)
        else:
            self.self_attn = nn.MultiheadAttention(d, h, dropout=0.0, bias=bias, batch_first=True)
        self.norm1, self.norm2 = make_norm(d), make_norm(d)
        self.ffn = make_ffn(d, d_ff, activation, bias, moe)
        self.pre_norm = pre_norm

    def attn(self, x, mask, pad, score_bias=None):
        if isinstance(self.self_attn, GroupedRopeAttention):
            return self.self_attn(x, mask, pad, score_bias)
        return self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=pad, need_weights=False)[0]

    def forward(self, x, src_mask=None, src_key_padding_mask=None, score_bias=None):
        if self.pre_norm:
            x = x + self.attn(self.norm1(x), src_mask, src_key_padding_mask, score_bias)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.attn(x, src_mask, src_key_padding_mask, score_bias))
        return self.norm2(x + self.ffn(x))


class DecoderBlockLayer(nn.Module):
    """A decoder layer built from a qkv model_config's block keys (`norm`,
    `activation`, `bias`, `pre_norm`), its self-attention GroupedRopeAttention
    (plain torch ops; T5's causal relative bias added to its scores when given),
    its cross-attention nn.MultiheadAttention(bias=bias), which no relative
    bias reaches. Wired as docs/checkpoint-format.md says:
      Post-LN  y = norm1(y + sa(y));  y = norm2(y + ca(y, mem));  y = norm3(y + ffn(y))
      Pre-LN   y = y + sa(norm1(y));  y = y + ca(norm2(y), mem);  y = y + ffn(norm3(y))"""

    def __init__(self, d, h, d_ff, activation, pre_norm, norm, bias, moe=None):
        super().__init__()
        make_norm = {"layer": nn.LayerNorm, "rms": RMSNorm}[norm]
        self.self_attn = GroupedRopeAttention(d, h, h, 0, bias)
        self.cross_attn = nn.MultiheadAttention(d, h, dropout=0.0, bias=bias, batch_first=True)
        self.norm1, self.norm2, self.norm3 = make_norm(d), make_norm(d), make_norm(d)
        self.ffn = make_ffn(d, d_ff, activation, bias, moe)
        self.pre_norm = pre_norm

    def cross(self, y, mem, mem_pad):
        return self.cross_attn(y, mem, mem, key_padding_mask=mem_pad, need_weights=False)[0]

    def forward(self, y, mem, tgt_mask, tgt_pad, mem_pad, score_bias=None):
        if self.pre_norm:
            y = y + self.self_attn(self.norm1(y), tgt_mask, tgt_pad, score_bias)
            y = y + self.cross(self.norm2(y), mem, mem_pad)
            return y + self.ffn(self.norm3(y))
        y = self.norm1(y + self.self_attn(y, tgt_mask, tgt_pad, score_bias))
        y = self.norm2(y + self.cross(y, mem, mem_pad))
        return self.norm3(y + self.ffn(y))


def is_paper_block(cfg):
    """True when the keys ask for nothing nn.TransformerEncoderLayer lacks."""
    return (cfg.get("norm", "layer") == "layer" and cfg.get("bias", True)
            and cfg["activation"] in ("relu", "gelu")
            and not cfg.get("kv_heads", 0) and not cfg.get("rope_base", 0)
            and not cfg.get("rel_buckets", 0) and not cfg.get("experts", 0))


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------

class TorchSeq2Seq(nn.Module):
    """Seq2SeqTransformer of SPEC.md built from PyTorch's own layers.

    Layers are called one by one (rather than through nn.TransformerEncoder)
    so the optional final norm is explicit and no nested-tensor fast path is
    ever considered.

    With the block keys of a qkv model_config (`norm`, `activation` "swiglu",
    `bias`, `rel_buckets`; seq2seq_config() maps a whole one) the encoder
    layers are BlockLayers, the decoder layers DecoderBlockLayers and the
    final norms of `norm`'s kind. With `rel_buckets` (T5's relative
    positions) no sinusoids are added; each stack holds one table
    (heads, rel_buckets), `encoder.rel_bias` (bidirectional buckets) and
    `decoder.rel_bias` (causal), shared by its layers' self-attentions and
    added to their scaled scores before the mask; cross-attention has none.
    """

    def __init__(self, cfg):
        super().__init__()
        d, h, f, act, pre = cfg["d_model"], cfg["heads"], cfg["d_ff"], cfg["activation"], cfg["norm_first"]
        self.d = d
        self.tied = cfg["tied"]
        self.src_embed = nn.Embedding(cfg["src_vocab"], d)
        self.tgt_embed = nn.Embedding(cfg["tgt_vocab"], d)
        self.rel, self.rel_max = cfg.get("rel_buckets", 0), cfg.get("rel_max_distance", 128)
        self.paper = is_paper_block(cfg)
        norm, bias = cfg.get("norm", "layer"), cfg.get("bias", True)
        if self.paper:
            self.enc_layers = nn.ModuleList([
                nn.TransformerEncoderLayer(d, h, f, dropout=0.0, activation=act,
                                           batch_first=True, norm_first=pre)
                for _ in range(cfg["enc_layers"])])
            self.dec_layers = nn.ModuleList([
                nn.TransformerDecoderLayer(d, h, f, dropout=0.0, activation=act,
                                           batch_first=True, norm_first=pre)
                for _ in range(cfg["dec_layers"])])
        else:
            self.enc_layers = nn.ModuleList([
                BlockLayer(d, h, f, act, pre, norm, bias, relative=bool(self.rel), moe=moe_of(cfg))
                for _ in range(cfg["enc_layers"])])
            self.dec_layers = nn.ModuleList([
                DecoderBlockLayer(d, h, f, act, pre, norm, bias, moe_of(cfg))
                for _ in range(cfg["dec_layers"])])
        make_norm = {"layer": nn.LayerNorm, "rms": RMSNorm}[norm]
        self.enc_norm = make_norm(d) if pre else None
        self.dec_norm = make_norm(d) if pre else None
        self.enc_rel_bias = nn.Parameter(torch.empty(h, self.rel)) if self.rel else None
        self.dec_rel_bias = nn.Parameter(torch.empty(h, self.rel)) if self.rel else None
        self.gen_weight = None if self.tied else nn.Parameter(torch.empty(cfg["tgt_vocab"], d))
        self.gen_bias = nn.Parameter(torch.empty(cfg["tgt_vocab"]))

    def binding(self):
        b = Binding()
        b.add("src_embed.weight", self.src_embed.weight)
        b.add("tgt_embed.weight", self.tgt_embed.weight)
        if self.rel:
            b.add("encoder.rel_bias", self.enc_rel_bias)
            b.add("decoder.rel_bias", self.dec_rel_bias)
        for i, layer in enumerate(self.enc_layers):
            if self.paper:
                b.encoder_layer(f"encoder.layers.{i}", layer)
            else:
                b.block_layer(f"encoder.layers.{i}", layer)
        for i, layer in enumerate(self.dec_layers):
            if self.paper:
                b.decoder_layer(f"decoder.layers.{i}", layer)
            else:
                b.decoder_block_layer(f"decoder.layers.{i}", layer)
        if self.enc_norm is not None:
            b.layer_norm("encoder.norm", self.enc_norm)
            b.layer_norm("decoder.norm", self.dec_norm)
        if not self.tied:
            b.add("lm_head.weight", self.gen_weight)
        b.add("lm_head.bias", self.gen_bias)
        b.check_covers(self)
        return b

    def forward(self, src, src_lens, tgt_in, tgt_lens):
        """Token ids (B,S) and (B,T); lengths for key padding masks, or None for
        none. Returns the logits (B,T,V), the memory (B,S,D) and the decoder
        output (B,T,D)."""
        s, t = src.shape[1], tgt_in.shape[1]
        src_pad = key_padding_mask(src_lens, s)
        tgt_pad = key_padding_mask(tgt_lens, t)
        scale = math.sqrt(self.d)

        # Relative positions: none added, the stacks' tables bias the scores.
        x = self.src_embed(src) * scale
        if not self.rel:
            x = x + sinusoidal(s, self.d)
        kw = {}
        if self.rel:  # (1, H, S, S), bidirectional buckets, every encoder layer
            kw["score_bias"] = relative_bias(self.enc_rel_bias, s, s, 0, True, self.rel_max)
        for layer in self.enc_layers:
            x = layer(x, src_key_padding_mask=src_pad, **kw)
        if self.enc_norm is not None:
            x = self.enc_norm(x)
        mem = x

        y = self.tgt_embed(tgt_in) * scale
        if not self.rel:
            y = y + sinusoidal(t, self.d)
        for layer in self.dec_layers:
            if self.paper:
                y = layer(y, mem, tgt_mask=causal_mask(t), tgt_key_padding_mask=tgt_pad,
                          memory_key_padding_mask=src_pad)
            else:  # (1, H, T, T) causal buckets, every decoder layer's self-attention
                bias = (relative_bias(self.dec_rel_bias, t, t, 0, False, self.rel_max)
                        if self.rel else None)
                y = layer(y, mem, causal_mask(t), tgt_pad, src_pad, bias)
        if self.dec_norm is not None:
            y = self.dec_norm(y)

        w = self.tgt_embed.weight if self.tied else self.gen_weight
        logits = F.linear(y, w, self.gen_bias)
        return logits, mem, y


def seq2seq_config(model_config):
    """TorchSeq2Seq's cfg from a qkv file's "seq2seq" model_config, its
    optional keys (norm, bias, rel_buckets, rel_max_distance) at their
    defaults. Sinusoidal or relative positions (no learned tables), the
    standard kernel's scaled maths, d_k = d_model / heads."""
    c = model_config
    assert not c.get("learned_positions", False), "TorchSeq2Seq has no learned position tables"
    assert "d_k" not in c and not c.get("kv_heads", 0), "TorchSeq2Seq has d_k = d_model / heads"
    assert c.get("scaled", True), "TorchSeq2Seq scales the scores by 1/sqrt(d_k)"
    return {"src_vocab": c["src_vocab"], "tgt_vocab": c["tgt_vocab"], "d_model": c["d_model"],
            "heads": c["heads"], "enc_layers": c["encoder_layers"],
            "dec_layers": c["decoder_layers"], "d_ff": c["d_ff"],
            "activation": c["activation"], "norm_first": c["pre_norm"],
            "tied": c["tie_weights"], "norm": c.get("norm", "layer"), "bias": c.get("bias", True),
            "rel_buckets": c.get("rel_buckets", 0),
            "rel_max_distance": c.get("rel_max_distance", 128)}


class TorchGPT(nn.Module):
    """Decoder-only LM of SPEC.md: learned positions, EncoderLayer blocks with
    causal + key padding masks, final LayerNorm, tied lm head without bias.
    With the block keys of a qkv model_config (`norm`, `activation` "swiglu",
    `bias`; gpt_config() maps a whole one) the layers are BlockLayers and
    the final norm is of `norm`'s kind; with the attention keys (`kv_heads`,
    `rope_base`, `rel_buckets`) their self-attention is GroupedRopeAttention,
    and with `rope_base` or `rel_buckets` there is no position table; with
    `rel_buckets` one causal table `rel_bias` (heads, rel_buckets), shared by
    every layer, adds T5's relative bias to the scores."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.tok_embed = nn.Embedding(cfg["vocab"], d)
        self.rope = cfg.get("rope_base", 0)
        self.rel, self.rel_max = cfg.get("rel_buckets", 0), cfg.get("rel_max_distance", 128)
        self.pos_embed = None if self.rope or self.rel else nn.Embedding(cfg["max_len"], d)
        self.rel_bias = nn.Parameter(torch.empty(cfg["heads"], self.rel)) if self.rel else None
        self.paper = is_paper_block(cfg)
        if self.paper:
            self.layers = nn.ModuleList([
                nn.TransformerEncoderLayer(d, cfg["heads"], cfg["d_ff"], dropout=0.0,
                                           activation=cfg["activation"], batch_first=True,
                                           norm_first=cfg["norm_first"])
                for _ in range(cfg["layers"])])
        else:
            self.layers = nn.ModuleList([
                BlockLayer(d, cfg["heads"], cfg["d_ff"], cfg["activation"], cfg["norm_first"],
                           cfg.get("norm", "layer"), cfg.get("bias", True),
                           cfg.get("kv_heads", 0), cfg.get("rope_base", 0), bool(self.rel),
                           moe_of(cfg))
                for _ in range(cfg["layers"])])
        self.norm = RMSNorm(d) if cfg.get("norm", "layer") == "rms" else nn.LayerNorm(d)

    def binding(self):
        b = Binding()
        b.add("tok_embed.weight", self.tok_embed.weight)
        if self.pos_embed is not None:
            b.add("pos_embed.weight", self.pos_embed.weight)
        for i, layer in enumerate(self.layers):
            if self.paper:
                b.encoder_layer(f"layers.{i}", layer)
            else:
                b.block_layer(f"layers.{i}", layer)
        b.layer_norm("norm", self.norm)
        if self.rel_bias is not None:
            b.add("rel_bias", self.rel_bias)
        b.check_covers(self)
        return b

    def forward(self, ids, lens=None):
        """Token ids (B,T); lengths for a key padding mask, or None. Logits (B,T,V)."""
        t = ids.shape[1]
        x = self.tok_embed(ids)  # no sqrt(D) scaling
        if self.pos_embed is not None:  # RoPE: the positions are rotated into Q and K
            x = x + self.pos_embed.weight[:t]
        kw = {}
        if self.rel_bias is not None:  # one causal table, every layer
            kw["score_bias"] = relative_bias(self.rel_bias, t, t, 0, False, self.rel_max)
        for layer in self.layers:
            x = layer(x, src_mask=causal_mask(t), src_key_padding_mask=key_padding_mask(lens, t),
                      **kw)
        x = self.norm(x)
        return F.linear(x, self.tok_embed.weight)  # tied head, no bias


def gpt_config(model_config):
    """TorchGPT's cfg from a qkv file's "gpt" model_config (Pre-LN, tied: the
    TorchGPT this file builds), its optional keys at their defaults."""
    c = model_config
    assert c["pre_norm"] and c["tie_weights"], "TorchGPT is Pre-LN with a tied head"
    assert "d_k" not in c, "TorchGPT has d_k = d_model / heads"
    return {"vocab": c["vocab"], "d_model": c["d_model"], "heads": c["heads"],
            "layers": c["layers"], "d_ff": c["d_ff"], "max_len": c["max_positions"],
            "activation": c["activation"], "norm_first": True,
            "norm": c.get("norm", "layer"), "bias": c.get("bias", True),
            "kv_heads": c.get("kv_heads", 0), "rope_base": c.get("rope_base", 0),
            "rel_buckets": c.get("rel_buckets", 0), "rel_max_distance": c.get("rel_max_distance", 128)}


class TorchEncoder(nn.Module):
    """models/encoder_only.h (model_kind "encoder"): the token embedding times
    sqrt(D) plus sinusoids, the encoder layers with a key padding mask
    (nn.TransformerEncoderLayer, or BlockLayer for the block keys), the final
    norm when Pre-LN, and a per-token Linear head `head` (D -> classes). With
    `rel_buckets` no sinusoids are added: one bidirectional table
    `encoder.rel_bias` (heads, rel_buckets), shared by every layer, adds T5's
    relative bias to the scaled scores before the mask."""

    def __init__(self, cfg):
        super().__init__()
        d, h = cfg["d_model"], cfg["heads"]
        self.d = d
        self.embed = nn.Embedding(cfg["vocab"], d)
        self.rel, self.rel_max = cfg.get("rel_buckets", 0), cfg.get("rel_max_distance", 128)
        self.rel_bias = nn.Parameter(torch.empty(h, self.rel)) if self.rel else None
        self.paper = is_paper_block(cfg)
        norm, pre = cfg.get("norm", "layer"), cfg["pre_norm"]
        if self.paper:
            self.layers = nn.ModuleList([
                nn.TransformerEncoderLayer(d, h, cfg["d_ff"], dropout=0.0,
                                           activation=cfg["activation"], batch_first=True,
                                           norm_first=pre)
                for _ in range(cfg["layers"])])
        else:
            self.layers = nn.ModuleList([
                BlockLayer(d, h, cfg["d_ff"], cfg["activation"], pre, norm, cfg.get("bias", True),
                           relative=bool(self.rel), moe=moe_of(cfg))
                for _ in range(cfg["layers"])])
        self.norm = None if not pre else (RMSNorm(d) if norm == "rms" else nn.LayerNorm(d))
        self.head = nn.Linear(d, cfg["classes"])

    def binding(self):
        b = Binding()
        b.add("embed.weight", self.embed.weight)
        if self.rel_bias is not None:
            b.add("encoder.rel_bias", self.rel_bias)
        for i, layer in enumerate(self.layers):
            if self.paper:
                b.encoder_layer(f"encoder.layers.{i}", layer)
            else:
                b.block_layer(f"encoder.layers.{i}", layer)
        if self.norm is not None:
            b.layer_norm("encoder.norm", self.norm)
        b.linear("head", self.head)
        b.check_covers(self)
        return b

    def forward(self, ids, lens):
        """Token ids (B,T) and their lengths -> logits (B,T,classes)."""
        t = ids.shape[1]
        x = self.embed(ids) * math.sqrt(self.d)
        kw = {}
        if self.rel_bias is not None:  # (1, H, T, T) bidirectional, every layer
            kw["score_bias"] = relative_bias(self.rel_bias, t, t, 0, True, self.rel_max)
        else:
            x = x + sinusoidal(t, self.d)
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=key_padding_mask(lens, t), **kw)
        if self.norm is not None:
            x = self.norm(x)
        return self.head(x)


def encoder_config(model_config):
    """TorchEncoder's cfg from a qkv file's "encoder" model_config, its
    optional keys at their defaults (d_k = d_model / heads, scaled scores)."""
    c = model_config
    assert "d_k" not in c and not c.get("kv_heads", 0), "TorchEncoder has d_k = d_model / heads"
    assert c.get("scaled", True), "TorchEncoder scales the scores by 1/sqrt(d_k)"
    return {"vocab": c["vocab"], "classes": c["classes"], "d_model": c["d_model"],
            "heads": c["heads"], "layers": c["layers"], "d_ff": c["d_ff"],
            "activation": c["activation"], "pre_norm": c["pre_norm"],
            "norm": c.get("norm", "layer"), "bias": c.get("bias", True),
            "rel_buckets": c.get("rel_buckets", 0),
            "rel_max_distance": c.get("rel_max_distance", 128)}


class TorchViT(nn.Module):
    """The Vision Transformer of a qkv "vit" model_config (models/vit.h): the
    patch projection as F.conv2d with kernel = stride = P, its weight qkv's
    patch.weight (D, C*P*P) reshaped to (D, C, P, P); the class token put in
    front (torch.cat); the learned position table added; the encoder layers
    (nn.TransformerEncoderLayer, or BlockLayer for the block keys), the final
    norm when Pre-LN; the head on position 0."""

    def __init__(self, cfg):
        super().__init__()
        d, c, p = cfg["d_model"], cfg["channels"], cfg["patch"]
        n = (cfg["image"] // p) ** 2
        self.c, self.p = c, p
        self.patch_weight = nn.Parameter(torch.empty(d, c * p * p))
        self.patch_bias = nn.Parameter(torch.empty(d))
        self.cls_token = nn.Parameter(torch.empty(1, 1, d))
        self.pos_embed = nn.Parameter(torch.empty(n + 1, d))
        self.paper = is_paper_block(cfg)
        pre, norm = cfg["pre_norm"], cfg.get("norm", "layer")
        if self.paper:
            self.layers = nn.ModuleList([
                nn.TransformerEncoderLayer(d, cfg["heads"], cfg["d_ff"], dropout=0.0,
                                           activation=cfg["activation"], batch_first=True,
                                           norm_first=pre)
                for _ in range(cfg["layers"])])
        else:
            self.layers = nn.ModuleList([
                BlockLayer(d, cfg["heads"], cfg["d_ff"], cfg["activation"], pre, norm,
                           cfg.get("bias", True), cfg.get("kv_heads", 0), cfg.get("rope_base", 0),
                           moe=moe_of(cfg))
                for _ in range(cfg["layers"])])
        self.norm = None if not pre else (RMSNorm(d) if norm == "rms" else nn.LayerNorm(d))
        self.head = nn.Linear(d, cfg["classes"])

    def binding(self):
        b = Binding()
        b.add("patch.weight", self.patch_weight)
        b.add("patch.bias", self.patch_bias)
        b.add("cls_token", self.cls_token)
        b.add("pos_embed", self.pos_embed)
        for i, layer in enumerate(self.layers):
            if self.paper:
                b.encoder_layer(f"encoder.layers.{i}", layer)
            else:
                b.block_layer(f"encoder.layers.{i}", layer)
        if self.norm is not None:
            b.layer_norm("encoder.norm", self.norm)
        b.linear("head", self.head)
        b.check_covers(self)
        return b

    def forward(self, images):
        """images (B, C, H, W) in [0, 1] -> logits (B, classes)."""
        w = self.patch_weight.view(-1, self.c, self.p, self.p)  # (D, C, P, P)
        x = F.conv2d(images, w, self.patch_bias, stride=self.p)  # (B, D, H/P, W/P)
        x = x.flatten(2).transpose(1, 2)  # (B, N, D), patches row-major
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        for layer in self.layers:
            x = layer(x)
        if self.norm is not None:
            x = self.norm(x)
        return self.head(x[:, 0])


class TorchBert(nn.Module):
    """models/bert.h (model_kind "bert"): token + segment + learned position
    embeddings, their LayerNorm, Post-LN nn.TransformerEncoderLayers with a
    key padding mask, and one head, from plain torch ops:
      head "mlm"       logits = LayerNorm(gelu(x W_d^T + b_d)) E^T + bias  (tied to E)
      head "classify"  logits = tanh(x[:, 0] W_p^T + b_p) W_c^T + b_c
      head "qa"        z = x W_qa^T + b_qa (B,T,2), transposed to (B,2,T), and
                       -1e9 wherever a span may not start or end (bert_span_allowed)
    The segment of a position is 0 up to and including the first sep_id, 1
    after it, 0 at padding (bert_segments)."""

    def __init__(self, cfg):
        super().__init__()
        d, v = cfg["d_model"], cfg["vocab"]
        self.cfg = cfg
        self.embed = nn.Parameter(torch.empty(v, d))
        self.segment_embed = nn.Parameter(torch.empty(cfg["segments"], d))
        self.pos_embed = nn.Parameter(torch.empty(cfg["max_positions"], d))
        self.embed_norm = nn.LayerNorm(d)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d, cfg["heads"], cfg["d_ff"], dropout=0.0,
                                       activation=cfg["activation"], batch_first=True,
                                       norm_first=False)
            for _ in range(cfg["layers"])])
        if cfg["head"] == "mlm":
            self.mlm_dense = nn.Linear(d, d)
            self.mlm_norm = nn.LayerNorm(d)
            self.mlm_bias = nn.Parameter(torch.empty(v))
        elif cfg["head"] == "qa":
            self.qa_outputs = nn.Linear(d, 2)
        else:
            self.pooler = nn.Linear(d, d)
            self.classifier = nn.Linear(d, cfg["classes"])

    def binding(self):
        b = Binding()
        b.add("embed.weight", self.embed)
        b.add("segment_embed.weight", self.segment_embed)
        b.add("pos_embed.weight", self.pos_embed)
        b.layer_norm("embed_norm", self.embed_norm)
        for i, layer in enumerate(self.layers):
            b.encoder_layer(f"encoder.layers.{i}", layer)
        if self.cfg["head"] == "mlm":
            b.linear("mlm.dense", self.mlm_dense)
            b.layer_norm("mlm.norm", self.mlm_norm)
            b.add("mlm.bias", self.mlm_bias)
        elif self.cfg["head"] == "qa":
            b.linear("qa_outputs", self.qa_outputs)
        else:
            b.linear("pooler", self.pooler)
            b.linear("classifier", self.classifier)
        b.check_covers(self)
        return b

    def forward(self, ids, lens):
        """Token ids (B,T) and their lengths -> mlm logits (B,T,V) or classify logits (B,C)."""
        t = ids.shape[1]
        seg = bert_segments(ids, lens, self.cfg["sep_id"], self.cfg["segments"])
        x = self.embed[ids] + self.segment_embed[seg] + self.pos_embed[:t]
        x = self.embed_norm(x)
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=key_padding_mask(lens, t))
        if self.cfg["head"] == "mlm":
            h = self.mlm_norm(F.gelu(self.mlm_dense(x)))  # exact erf GELU
            return F.linear(h, self.embed, self.mlm_bias)
        if self.cfg["head"] == "qa":
            allowed = bert_span_allowed(seg, lens)              # (B,T) bool
            z = self.qa_outputs(x).transpose(1, 2)              # (B,2,T)
            return z.masked_fill(~allowed[:, None, :], -1e9)
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


def bert_segments(ids, lens, sep_id, segments):
    """(B,T) segment ids: 0 up to and including the first sep_id of each
    sequence, 1 after it (at most segments - 1), 0 at padding."""
    seg = torch.zeros_like(ids)
    for b in range(ids.shape[0]):
        s = 0
        for i in range(lens[b]):
            seg[b, i] = min(s, segments - 1)
            if ids[b, i] == sep_id:
                s = 1
    return seg


def bert_span_allowed(seg, lens):
    """(B,T) where a span may start or end: position 0 ([CLS]) and segment
    1's positions but each sequence's last (its final [SEP])."""
    allowed = torch.zeros(seg.shape, dtype=torch.bool)
    for b in range(seg.shape[0]):
        allowed[b, 0] = True
        for i in range(1, int(lens[b]) - 1):
            allowed[b, i] = bool(seg[b, i] != 0)
    return allowed


def bert_config(model_config):
    """TorchBert's cfg from a qkv file's "bert" model_config (Post-LN, the
    paper's block), its optional keys at their defaults."""
    c = model_config
    assert not c["pre_norm"] and is_paper_block(c), "TorchBert is Post-LN with the paper's block"
    return {"vocab": c["vocab"], "d_model": c["d_model"], "heads": c["heads"],
            "layers": c["layers"], "d_ff": c["d_ff"], "max_positions": c["max_positions"],
            "activation": c["activation"], "head": c["head"],
            "segments": c.get("segments", 2), "classes": c.get("classes", 0),
            "sep_id": c.get("sep_id", 2)}
