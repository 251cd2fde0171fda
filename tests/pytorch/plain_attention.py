"""Multi-head attention written in plain torch ops, with the query/key head size
d_k set apart from d_model / heads (Table 3 row B of the paper; qkv's
AttentionOptions::d_k). torch.nn.MultiheadAttention cannot express it: its head
size is always embed_dim / num_heads. make_fixtures.py checks this reference
against nn.MultiheadAttention where both exist (d_k = D / H), then writes the
fixture attention_head_size.safetensors from it.

Shapes: xq (B,T,D), xkv (B,S,D); wq, wk (H*d_k, D), bq, bk (H*d_k); wv, wo (D, D),
bv, bo (D); d_v = D / H. A mask is a bool tensor broadcastable to (B,T,S),
True = hidden.
"""

import math

import torch
import torch.nn.functional as F


def project(x, p, name):
    """x W^T + b for the Linear `name` (no bias when p has no `name.bias`)."""
    return F.linear(x, p[f"{name}.weight"], p.get(f"{name}.bias"))


def split_heads(z, heads):
    """(B, n, H*d) -> (B, H, n, d)."""
    b, n, e = z.shape
    return z.reshape(b, n, heads, e // heads).transpose(1, 2)


def merge_heads(o):
    """(B, H, T, d_v) -> (B, T, H*d_v)."""
    b, h, t, dv = o.shape
    return o.transpose(1, 2).reshape(b, t, h * dv)


def softmax_attention(xq, xkv, p, heads, mask):
    """Standard attention: P = softmax(Q_h K_h^T / sqrt(d_k) + M), O_h = P V_h.
    Returns (out (B,T,D), P (B,H,T,S)). The memory-efficient and sparse kernels
    compute these numbers too (sparse: with its pattern in the mask)."""
    q = split_heads(project(xq, p, "w_q"), heads)  # (B,H,T,d_k)
    k = split_heads(project(xkv, p, "w_k"), heads)  # (B,H,S,d_k)
    v = split_heads(project(xkv, p, "w_v"), heads)  # (B,H,S,d_v)
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B,H,T,S)
    scores = scores.masked_fill(mask[:, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return project(merge_heads(probs @ v), p, "w_o"), probs


def phi(x):
    """The linear kernel's feature map, elu(x) + 1."""
    return F.elu(x) + 1


def linear_attention(xq, xkv, p, heads, lens, causal):
    """qkv's linear kernel (nn/attention_linear.cpp): per head, with Qf = phi(Q_h),
    Kf = phi(K_h) zeroed at padded keys (j >= lens[b]),
      KV_i = sum_j Kf_j^T V_j (d_k, d_v),  z_i = sum_j Kf_j (d_k)
    over every key, or over j <= i (prefix sums) when causal;
      O_i = (Qf_i KV_i) / (Qf_i . z_i).  No scale. Returns out (B,T,D)."""
    qf = phi(split_heads(project(xq, p, "w_q"), heads))  # (B,H,T,d_k)
    kf = phi(split_heads(project(xkv, p, "w_k"), heads))  # (B,H,S,d_k)
    v = split_heads(project(xkv, p, "w_v"), heads)  # (B,H,S,d_v)
    s = kf.shape[2]
    keep = ~(torch.arange(s)[None, :] >= torch.as_tensor(lens)[:, None])  # (B,S)
    kf = kf * keep[:, None, :, None]
    kv = kf[..., :, None] * v[..., None, :]  # (B,H,S,d_k,d_v): Kf_j^T V_j per key
    if causal:  # T == S: query i sees the prefix j <= i
        kv, z = kv.cumsum(2), kf.cumsum(2)  # (B,H,T,d_k,d_v), (B,H,T,d_k)
        num = (qf[..., None] * kv).sum(-2)  # (B,H,T,d_v)
        den = (qf * z).sum(-1, keepdim=True)  # (B,H,T,1)
    else:
        kv, z = kv.sum(2), kf.sum(2)  # (B,H,d_k,d_v), (B,H,d_k)
        num = qf @ kv  # (B,H,T,d_v)
        den = qf @ z[..., None]  # (B,H,T,1)
    return project(merge_heads(num / den), p, "w_o")


def linear_attention_by_scores(xq, xkv, p, heads, mask):
    """The same numbers with the (T, S) matrix formed: A = phi(Q) phi(K)^T with hidden
    entries 0, O = A V / rowsum(A). make_fixtures.py checks linear_attention against it."""
    qf = phi(split_heads(project(xq, p, "w_q"), heads))
    kf = phi(split_heads(project(xkv, p, "w_k"), heads))
    v = split_heads(project(xkv, p, "w_v"), heads)
    a = (qf @ kf.transpose(-2, -1)).masked_fill(mask[:, None], 0.0)  # (B,H,T,S)
    return project(merge_heads((a @ v) / a.sum(-1, keepdim=True)), p, "w_o")
