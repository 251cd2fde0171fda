#!/usr/bin/python3
"""Write PyTorch reference fixtures for qkv into tests/fixtures/.

Run from anywhere with the Python that has Debian's python3-torch (1.13):

    /usr/bin/python3 tests/pytorch/make_fixtures.py

Precision: every reference computation runs in float64 (torch default dtype is
set to float64 below), and the results are rounded to float32 only when they
are written. A fixture therefore holds the exact answer, correctly rounded to
F32, not the answer of some float32 kernel; the C++ side should compare with a
tolerance suited to its own float32 arithmetic.

The reference is PyTorch's own code: nn.MultiheadAttention,
nn.TransformerEncoderLayer / nn.TransformerDecoderLayer (batch_first, dropout
0, norm_first for Pre-LN), nn.LayerNorm, nn.Linear, F.cross_entropy and
torch.optim. Parameters are drawn under qkv's names (see SPEC.md) and copied
into the PyTorch modules; gradients are read back from the same places. The
`Binding` class (reference.py) is the one spot that maps qkv names onto PyTorch
parameters (e.g. qkv `w_k.weight` = rows D..2D of `in_proj_weight`).

Everything is seeded, so re-running gives byte-identical files.
"""

import json
import math
import os
import sys

import numpy as np

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pyenv's python3 shadows /usr/bin/python3 on some machines
    sys.exit("make_fixtures.py needs torch: run it with /usr/bin/python3 "
             "(Debian's python3-torch)")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402  (our own safetensors reader/writer)
from reference import (Binding, TorchBert, TorchEncoder, TorchGPT, TorchSeq2Seq,  # noqa: E402
                       TorchViT, bert_config, causal_mask, encoder_config, gpt_config,
                       seq2seq_config, swiglu_hidden,
                       join, key_padding_mask, relative_bias, relative_position_bucket)
import plain_attention  # noqa: E402  (attention with d_k != D/H, in plain torch ops)
import format_reference  # noqa: E402  (docs/checkpoint-format.md's models, from the page alone)

OUT_DIR = os.path.normpath(os.path.join(HERE, "..", "fixtures"))

# All modules and tensors below are created in float64.
torch.set_default_dtype(torch.float64)

COMMON_META = {
    "generator": "tests/pytorch/make_fixtures.py",
    "torch_version": torch.__version__,
    "reference_dtype": "float64",
    "stored_dtype": "float32",
}


def f32_exact(t):
    """Round a float64 tensor to the nearest float32 value (kept as float64).

    Parameters and float inputs are drawn this way so that the values stored
    in F32 are exactly the values the float64 reference computed with.
    """
    return t.to(torch.float32).to(torch.float64)


# ---------------------------------------------------------------------------
# Random parameters under qkv names
# ---------------------------------------------------------------------------

class Init:
    """Seeded parameter factory. Every draw is a float64 tensor.

    Weights are Xavier-uniform; biases and LayerNorm gamma/beta are random too
    (gamma around 1, beta around 0) so that a wrong bias or gamma gradient
    cannot hide behind a zero or a one.
    """

    def __init__(self, seed):
        self.gen = torch.Generator().manual_seed(seed)

    def uniform(self, shape, a):
        """U(-a, a), rounded to float32."""
        return f32_exact((torch.rand(shape, generator=self.gen) * 2.0 - 1.0) * a)

    def normal(self, shape, std=1.0):
        """N(0, std^2), rounded to float32."""
        return f32_exact(torch.randn(shape, generator=self.gen) * std)

    def ints(self, low, high, shape):
        """Integers in [low, high)."""
        return torch.randint(low, high, shape, generator=self.gen)

    # --- building blocks, each adds "<prefix>.<name>" entries to `p` ---

    def linear(self, p, prefix, n_in, n_out, bias=True):
        p[join(prefix, "weight")] = self.uniform((n_out, n_in), math.sqrt(6.0 / (n_in + n_out)))
        if bias:
            p[join(prefix, "bias")] = self.uniform((n_out,), 0.2)

    def layer_norm(self, p, prefix, d):
        p[join(prefix, "weight")] = f32_exact(1.0 + self.uniform((d,), 0.3))
        p[join(prefix, "bias")] = self.uniform((d,), 0.2)

    def embedding(self, p, prefix, v, d):
        p[join(prefix, "weight")] = self.uniform((v, d), math.sqrt(6.0 / (v + d)))

    def mha(self, p, prefix, d):
        for w in ("w_q", "w_k", "w_v", "w_o"):
            self.linear(p, join(prefix, w), d, d)

    def ffn(self, p, prefix, d, f):
        self.linear(p, join(prefix, "linear1"), d, f)
        self.linear(p, join(prefix, "linear2"), f, d)

    def encoder_layer(self, p, prefix, d, f):
        self.mha(p, join(prefix, "self_attn"), d)
        self.layer_norm(p, join(prefix, "norm1"), d)
        self.ffn(p, join(prefix, "ffn"), d, f)
        self.layer_norm(p, join(prefix, "norm2"), d)

    def decoder_layer(self, p, prefix, d, f):
        self.mha(p, join(prefix, "self_attn"), d)
        self.layer_norm(p, join(prefix, "norm1"), d)
        self.mha(p, join(prefix, "cross_attn"), d)
        self.layer_norm(p, join(prefix, "norm2"), d)
        self.ffn(p, join(prefix, "ffn"), d, f)
        self.layer_norm(p, join(prefix, "norm3"), d)


# ---------------------------------------------------------------------------
# Token batches
# ---------------------------------------------------------------------------

def padded_tokens(init, lens, n, vocab, pad_id=0):
    """(B, n) int64 ids: random real tokens (never pad_id) before len[b], pad_id after."""
    ids = init.ints(1, vocab, (len(lens), n))
    ids[key_padding_mask(lens, n)] = pad_id
    return ids


def f32(t):
    """float64 torch tensor (or int tensor) -> float32 numpy array for storage."""
    return t.detach().to(torch.float64).cpu().numpy().astype(np.float32)


def is_input(key):
    """Keys whose values were fed to the reference (params, inputs, optimizer start)."""
    parts = key.split(".")
    return "param" in parts or "in" in parts or key == "p0" or key in ("g1", "g2", "g3")


def write(name, tensors, meta):
    path = os.path.join(OUT_DIR, name)
    for k, v in tensors.items():
        if is_input(k):  # what the fixture stores is exactly what the reference used
            assert torch.equal(v.detach().double(), f32_exact(v.detach().double())), k
    st.save_file({k: f32(v) for k, v in tensors.items()}, path,
                 {**COMMON_META, **{k: str(v) for k, v in meta.items()}})
    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


def model_record(params, grads, inputs, outputs):
    """Prefix a model's tensors with param./grad./in./out."""
    rec = {}
    for prefix, group in (("param", params), ("grad", grads), ("in", inputs), ("out", outputs)):
        for k, v in group.items():
            rec[f"{prefix}.{k}"] = v
    return rec


# ---------------------------------------------------------------------------
# 1 + 2: Seq2SeqTransformer
# ---------------------------------------------------------------------------

def make_seq2seq(filename, seed, norm_first, activation, tied, label_smoothing):
    cfg = dict(d_model=16, heads=2, enc_layers=1, dec_layers=1, d_ff=32,
               src_vocab=11, tgt_vocab=11, pad_id=0, norm_first=norm_first,
               activation=activation, tied=tied, label_smoothing=label_smoothing)
    init = Init(seed)
    d, f = cfg["d_model"], cfg["d_ff"]

    # Parameters under qkv names.
    params = {}
    init.embedding(params, "src_embed", cfg["src_vocab"], d)
    init.embedding(params, "tgt_embed", cfg["tgt_vocab"], d)
    for i in range(cfg["enc_layers"]):
        init.encoder_layer(params, f"encoder.layers.{i}", d, f)
    for i in range(cfg["dec_layers"]):
        init.decoder_layer(params, f"decoder.layers.{i}", d, f)
    if norm_first:
        init.layer_norm(params, "encoder.norm", d)
        init.layer_norm(params, "decoder.norm", d)
    if not tied:
        init.linear(params, "lm_head", d, cfg["tgt_vocab"])
    else:
        params["lm_head.bias"] = init.uniform((cfg["tgt_vocab"],), 0.2)

    # Batch: B=3, S=7, T=6. tgt_in starts with BOS=1, tgt_out is tgt_in shifted
    # left by one; both are pad (0) from the target length on.
    src_lens, tgt_lens = [7, 5, 3], [6, 4, 2]
    S, T = 7, 6
    src = padded_tokens(init, src_lens, S, cfg["src_vocab"])
    full = padded_tokens(init, [n + 1 for n in tgt_lens], T + 1, cfg["tgt_vocab"])
    full[:, 0] = 1
    tgt_in = full[:, :T].clone()
    tgt_out = full[:, 1:].clone()
    pad = key_padding_mask(tgt_lens, T)
    tgt_in[pad] = 0
    tgt_out[pad] = 0

    model = TorchSeq2Seq(cfg)
    model.train()  # dropout is 0 anyway; train mode keeps PyTorch off its inference fast path
    binding = model.binding()
    binding.load(params)

    logits, mem, dec = model(src, src_lens, tgt_in, tgt_lens)
    v = cfg["tgt_vocab"]
    loss = F.cross_entropy(logits.reshape(-1, v), tgt_out.reshape(-1),
                           ignore_index=cfg["pad_id"], label_smoothing=label_smoothing)
    loss.backward()

    inputs = {"src": src, "src_lens": torch.tensor(src_lens), "tgt_in": tgt_in,
              "tgt_out": tgt_out, "tgt_lens": torch.tensor(tgt_lens)}
    outputs = {"logits": logits, "loss": loss.reshape(1), "enc": mem, "dec": dec}
    meta = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in cfg.items()}
    meta.update(model="seq2seq", positions="sinusoidal", embed_scale="sqrt(d_model)",
                generator_bias="true", ignore_index=cfg["pad_id"], dropout=0.0,
                layer_norm_eps=1e-5, batch=3, src_len=S, tgt_len=T,
                loss="cross_entropy(logits.reshape(-1,V), tgt_out.reshape(-1), "
                     f"ignore_index=0, label_smoothing={label_smoothing}), mean over non-pad",
                **{"out.enc": "encoder output incl. final norm (B,S,D)",
                   "out.dec": "decoder output incl. final norm, before generator (B,T,D)"})
    write(filename, model_record(params, binding.grads(), inputs, outputs), meta)


def make_seq2seq_block(filename, seed, model_config, label_smoothing):
    """A seq2seq whose model_config has the block keys (norm, activation,
    bias) and T5's relative positions (rel_buckets, rel_max_distance): built
    by reference.py from the keys (seq2seq_config), and stored with the
    model_config itself, which the C++ test builds its model from. B 3,
    S 9, T 9: with 8 buckets up to distance 6 the longest rows reach the
    logarithmic buckets and the last one, in both stacks."""
    cfg = seq2seq_config(model_config)
    init = Init(seed)
    d, f, bias, h = cfg["d_model"], cfg["d_ff"], cfg["bias"], cfg["heads"]
    rms = cfg["norm"] == "rms"

    def norm(p, prefix):
        if rms:  # the gain alone, around 1
            p[join(prefix, "weight")] = f32_exact(1.0 + init.uniform((d,), 0.3))
        else:
            init.layer_norm(p, prefix, d)

    def attention(p, prefix):
        for w in ("w_q", "w_k", "w_v", "w_o"):
            init.linear(p, join(prefix, w), d, d, bias)

    def ffn(p, prefix):
        if cfg["activation"] == "swiglu":
            hid = swiglu_hidden(f)
            init.linear(p, join(prefix, "gate"), d, hid, False)
            init.linear(p, join(prefix, "up"), d, hid, False)
            init.linear(p, join(prefix, "down"), hid, d, False)
        else:
            init.linear(p, join(prefix, "linear1"), d, f, bias)
            init.linear(p, join(prefix, "linear2"), f, d, bias)

    params = {}
    init.embedding(params, "src_embed", cfg["src_vocab"], d)
    init.embedding(params, "tgt_embed", cfg["tgt_vocab"], d)
    if cfg["rel_buckets"]:  # one table per stack: bidirectional, causal
        params["encoder.rel_bias"] = init.normal((h, cfg["rel_buckets"]), 1.0)
        params["decoder.rel_bias"] = init.normal((h, cfg["rel_buckets"]), 1.0)
    for i in range(cfg["enc_layers"]):
        prefix = f"encoder.layers.{i}"
        attention(params, join(prefix, "self_attn"))
        norm(params, join(prefix, "norm1"))
        ffn(params, join(prefix, "ffn"))
        norm(params, join(prefix, "norm2"))
    for i in range(cfg["dec_layers"]):
        prefix = f"decoder.layers.{i}"
        attention(params, join(prefix, "self_attn"))
        norm(params, join(prefix, "norm1"))
        attention(params, join(prefix, "cross_attn"))
        norm(params, join(prefix, "norm2"))
        ffn(params, join(prefix, "ffn"))
        norm(params, join(prefix, "norm3"))
    if cfg["norm_first"]:
        norm(params, "encoder.norm")
        norm(params, "decoder.norm")
    if not cfg["tied"]:
        init.linear(params, "lm_head", d, cfg["tgt_vocab"])
    else:
        params["lm_head.bias"] = init.uniform((cfg["tgt_vocab"],), 0.2)

    src_lens, tgt_lens = [9, 6, 3], [9, 5, 2]
    S, T = 9, 9
    src = padded_tokens(init, src_lens, S, cfg["src_vocab"])
    full = padded_tokens(init, [n + 1 for n in tgt_lens], T + 1, cfg["tgt_vocab"])
    full[:, 0] = 1
    tgt_in = full[:, :T].clone()
    tgt_out = full[:, 1:].clone()
    pad = key_padding_mask(tgt_lens, T)
    tgt_in[pad] = 0
    tgt_out[pad] = 0

    model = TorchSeq2Seq(cfg)
    model.train()
    binding = model.binding()
    binding.load(params)
    logits, mem, dec = model(src, src_lens, tgt_in, tgt_lens)
    v = cfg["tgt_vocab"]
    loss = F.cross_entropy(logits.reshape(-1, v), tgt_out.reshape(-1), ignore_index=0,
                           label_smoothing=label_smoothing)
    loss.backward()

    inputs = {"src": src, "src_lens": torch.tensor(src_lens), "tgt_in": tgt_in,
              "tgt_out": tgt_out, "tgt_lens": torch.tensor(tgt_lens)}
    outputs = {"logits": logits, "loss": loss.reshape(1), "enc": mem, "dec": dec}
    meta = {"model_config": json.dumps(model_config, sort_keys=True),
            "label_smoothing": label_smoothing,
            "reference": "reference.py TorchSeq2Seq(seq2seq_config(model_config)): BlockLayer "
                         "encoder layers and DecoderBlockLayer decoder layers, self-attention "
                         "GroupedRopeAttention (plain torch ops)" + (
                             " with T5's relative bias (relative_bias: encoder.rel_bias "
                             "bidirectional, decoder.rel_bias causal, added to the scaled "
                             "scores before the mask; no sinusoids)" if cfg["rel_buckets"]
                             else "") + ", cross-attention nn.MultiheadAttention(bias=bias)",
            "batch": 3, "src_len": S, "tgt_len": T,
            "loss": "cross_entropy(logits.reshape(-1,V), tgt_out.reshape(-1), "
                    f"ignore_index=0, label_smoothing={label_smoothing})",
            "out.enc": "encoder output incl. final norm (B,S,D)",
            "out.dec": "decoder output incl. final norm, before lm_head (B,T,D)"}
    write(filename, model_record(params, binding.grads(), inputs, outputs), meta)


def make_encoder_block(filename, seed, model_config):
    """An encoder (one label per token) built by reference.py's TorchEncoder
    from its model_config (encoder_config), stored with the model_config,
    which the C++ test builds its model from. B 2, T 9: with 8 buckets up to
    distance 6 the longest rows reach the last bucket both ways."""
    cfg = encoder_config(model_config)
    init = Init(seed)
    d, f, bias, h = cfg["d_model"], cfg["d_ff"], cfg["bias"], cfg["heads"]
    params = {}
    init.embedding(params, "embed", cfg["vocab"], d)
    if cfg["rel_buckets"]:
        params["encoder.rel_bias"] = init.normal((h, cfg["rel_buckets"]), 1.0)
    for i in range(cfg["layers"]):
        prefix = f"encoder.layers.{i}"
        for w in ("w_q", "w_k", "w_v", "w_o"):
            init.linear(params, join(prefix, "self_attn." + w), d, d, bias)
        init.layer_norm(params, join(prefix, "norm1"), d)
        init.linear(params, join(prefix, "ffn.linear1"), d, f, bias)
        init.linear(params, join(prefix, "ffn.linear2"), f, d, bias)
        init.layer_norm(params, join(prefix, "norm2"), d)
    if cfg["pre_norm"]:
        init.layer_norm(params, "encoder.norm", d)
    init.linear(params, "head", d, cfg["classes"])

    lens, T = [9, 6], 9
    ids = padded_tokens(init, lens, T, cfg["vocab"])
    targets = init.ints(1, cfg["classes"], (2, T))
    targets[key_padding_mask(lens, T)] = 0  # padding: ignored

    model = TorchEncoder(cfg)
    model.train()
    binding = model.binding()
    binding.load(params)
    logits = model(ids, lens)
    loss = F.cross_entropy(logits.reshape(-1, cfg["classes"]), targets.reshape(-1), ignore_index=0)
    loss.backward()

    inputs = {"ids": ids, "lens": torch.tensor(lens), "targets": targets}
    outputs = {"logits": logits, "loss": loss.reshape(1)}
    meta = {"model_config": json.dumps(model_config, sort_keys=True),
            "reference": "reference.py TorchEncoder(encoder_config(model_config)): embed * "
                         "sqrt(D), BlockLayer encoder layers (self-attention "
                         "GroupedRopeAttention with T5's bidirectional relative bias, "
                         "encoder.rel_bias, added to the scaled scores before the mask; no "
                         "sinusoids), the final LayerNorm, nn.Linear head per token",
            "batch": 2, "seq_len": T, "mask": "key_padding",
            "loss": "cross_entropy(logits.reshape(-1,C), targets.reshape(-1), ignore_index=0)"}
    write(filename, model_record(params, binding.grads(), inputs, outputs), meta)


# ---------------------------------------------------------------------------
# 3: decoder-only LM
# ---------------------------------------------------------------------------

def make_gpt(filename, seed):
    cfg = dict(vocab=13, d_model=16, heads=2, layers=2, d_ff=64, max_len=16,
               norm_first=True, activation="gelu", pad_id=0, label_smoothing=0.0)
    init = Init(seed)
    d = cfg["d_model"]
    params = {}
    init.embedding(params, "tok_embed", cfg["vocab"], d)
    params["pos_embed.weight"] = init.normal((cfg["max_len"], d), 0.3)
    for i in range(cfg["layers"]):
        init.encoder_layer(params, f"layers.{i}", d, cfg["d_ff"])
    init.layer_norm(params, "norm", d)

    # B=2, T=8, lengths [8, 6]; targets[b, t] = ids[b, t+1] for t+1 < len[b], else 0 (ignored).
    lens, T = [8, 6], 8
    ids = padded_tokens(init, lens, T, cfg["vocab"])
    targets = torch.zeros_like(ids)
    targets[:, :-1] = ids[:, 1:]  # already 0 wherever t+1 >= len

    model = TorchGPT(cfg)
    model.train()
    binding = model.binding()
    binding.load(params)
    logits = model(ids, lens)
    loss = F.cross_entropy(logits.reshape(-1, cfg["vocab"]), targets.reshape(-1),
                           ignore_index=cfg["pad_id"])
    loss.backward()

    inputs = {"ids": ids, "lens": torch.tensor(lens), "targets": targets}
    outputs = {"logits": logits, "loss": loss.reshape(1)}
    meta = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in cfg.items()}
    meta.update(model="gpt", positions="learned", embed_scale="1", tied="true",
                lm_head_bias="false", final_norm="true", ignore_index=0, dropout=0.0,
                layer_norm_eps=1e-5, batch=2, seq_len=T, mask="causal+key_padding",
                loss="cross_entropy(logits.reshape(-1,V), targets.reshape(-1), ignore_index=0)")
    write(filename, model_record(params, binding.grads(), inputs, outputs), meta)


# ---------------------------------------------------------------------------
# 3b: BERT, both heads (models/bert.h)
# ---------------------------------------------------------------------------

def make_bert(filename, seed, head):
    """A tiny Bert (model_config below, head mlm or classify) on three
    sequences: two texts "<s> A </s> B </s>", one text "<s> A </s>", and a
    shorter one padded. mlm: some non-special positions masked ([MASK] 3, or
    kept, or another token), targets the original ids there and 0 elsewhere,
    loss = cross_entropy(ignore_index=0), the mean over the chosen positions;
    classify: labels in [1, classes), loss = cross_entropy over the batch;
    qa: each sequence's (start, end) among [CLS] and its second segment, the
    loss cross_entropy over the (B,2,T) span logits: the mean of the start
    and end cross-entropies (Hugging Face's BertForQuestionAnswering)."""
    model_config = {
        "vocab": 13, "max_positions": 12, "head": head, "d_model": 16, "heads": 2,
        "layers": 2, "d_ff": 32, "dropout": 0.0, "pre_norm": False, "seed": 0,
        "activation": "gelu", "attention": "standard", "window": 128, "global_every": 64,
        "scaled": True, "segments": 2, "classes": 4, "sep_id": 2, "mask_id": 3}
    cfg = bert_config(model_config)
    init = Init(seed)
    d, v = cfg["d_model"], cfg["vocab"]
    params = {}
    init.embedding(params, "embed", v, d)
    params["segment_embed.weight"] = init.normal((cfg["segments"], d), 0.3)
    params["pos_embed.weight"] = init.normal((cfg["max_positions"], d), 0.3)
    init.layer_norm(params, "embed_norm", d)
    for i in range(cfg["layers"]):
        init.encoder_layer(params, f"encoder.layers.{i}", d, cfg["d_ff"])
    if head == "mlm":
        init.linear(params, "mlm.dense", d, d)
        init.layer_norm(params, "mlm.norm", d)
        params["mlm.bias"] = init.uniform((v,), 0.2)
    elif head == "qa":
        init.linear(params, "qa_outputs", d, 2)
    else:
        init.linear(params, "pooler", d, d)
        init.linear(params, "classifier", d, cfg["classes"])

    # "<s> a a a </s> b b b </s>", "<s> a a a a a </s>", "<s> a a </s>"; words from [4, V)
    lens, T = [9, 7, 4], 9
    ids = torch.zeros(3, T, dtype=torch.long)
    for b, seps in enumerate(([4, 8], [6], [3])):
        ids[b, :lens[b]] = init.ints(4, v, (lens[b],))
        ids[b, 0] = 1
        for s in seps:
            ids[b, s] = 2
    model = TorchBert(cfg)
    model.train()
    binding = model.binding()
    binding.load(params)
    if head == "mlm":
        targets = torch.zeros_like(ids)
        chosen = [[1, 3, 6], [2, 5], [1]]  # 6 positions, none special
        for b, pos in enumerate(chosen):
            for i in pos:
                targets[b, i] = ids[b, i]
        masked = ids.clone()
        masked[0, 1] = masked[0, 6] = masked[1, 2] = masked[2, 1] = 3  # [MASK]
        masked[1, 5] = 4 if ids[1, 5] != 4 else 5                     # a random token
        ids = masked                                                   # (0, 3): unchanged
        logits = model(ids, lens)
        loss = F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), ignore_index=0)
    elif head == "qa":
        # (start, end) per sequence: a span of segment 1 (positions 5..7 of
        # the first), and [CLS], no answer, for the two one-text sequences
        # (they have no second segment to answer from).
        targets = torch.tensor([[5, 7], [0, 0], [0, 0]])
        logits = model(ids, lens)  # (B,2,T)
        loss = F.cross_entropy(logits.reshape(-1, T), targets.reshape(-1))
    else:
        targets = torch.tensor([3, 1, 2])
        logits = model(ids, lens)
        loss = F.cross_entropy(logits, targets)
    loss.backward()

    inputs = {"ids": ids, "lens": torch.tensor(lens), "targets": targets}
    outputs = {"logits": logits, "loss": loss.reshape(1)}
    meta = {"model_config": json.dumps(model_config, sort_keys=True),
            "reference": "reference.py TorchBert(bert_config(model_config)): plain torch ops "
                         "around nn.TransformerEncoderLayer (Post-LN, GELU, dropout 0)",
            "batch": 3, "seq_len": T, "mask": "key_padding",
            "loss": ("cross_entropy(logits.reshape(-1,V), targets.reshape(-1), ignore_index=0)"
                     if head == "mlm" else
                     "cross_entropy(logits (B*2,T), targets (B*2): start, end)" if head == "qa"
                     else "cross_entropy(logits (B,C), targets (B))")}
    write(filename, model_record(params, binding.grads(), inputs, outputs), meta)


def make_gpt_block(filename, seed, model_config):
    """A gpt whose model_config has the block keys (norm, activation, bias) and
    the attention keys (kv_heads, rope_base):
    built by reference.py from the keys (gpt_config), and stored with the
    model_config itself, which the C++ test builds its model from."""
    cfg = gpt_config(model_config)
    init = Init(seed)
    d, f, bias = cfg["d_model"], cfg["d_ff"], cfg["bias"]
    rms = cfg["norm"] == "rms"

    def norm(p, prefix):
        if rms:  # the gain alone, around 1
            p[join(prefix, "weight")] = f32_exact(1.0 + init.uniform((d,), 0.3))
        else:
            init.layer_norm(p, prefix, d)

    params = {}
    init.embedding(params, "tok_embed", cfg["vocab"], d)
    if not cfg["rope_base"] and not cfg["rel_buckets"]:  # rotary or relative positions: no table
        params["pos_embed.weight"] = init.normal((cfg["max_len"], d), 0.3)
    # kv_heads K: w_k, w_v (K * D / H, D)
    kv = (cfg["kv_heads"] or cfg["heads"]) * (d // cfg["heads"])
    for i in range(cfg["layers"]):
        prefix = f"layers.{i}"
        for w, rows in (("w_q", d), ("w_k", kv), ("w_v", kv), ("w_o", d)):
            init.linear(params, join(prefix, "self_attn." + w), d, rows, bias)
        norm(params, join(prefix, "norm1"))
        if cfg["activation"] == "swiglu":
            h = swiglu_hidden(f)
            init.linear(params, join(prefix, "ffn.gate"), d, h, False)
            init.linear(params, join(prefix, "ffn.up"), d, h, False)
            init.linear(params, join(prefix, "ffn.down"), h, d, False)
        else:
            init.linear(params, join(prefix, "ffn.linear1"), d, f, bias)
            init.linear(params, join(prefix, "ffn.linear2"), f, d, bias)
        norm(params, join(prefix, "norm2"))
    norm(params, "norm")
    if cfg["rel_buckets"]:  # T5's relative positions: one causal table
        params["rel_bias"] = init.normal((cfg["heads"], cfg["rel_buckets"]), 1.0)

    lens, T = [8, 5], 8
    ids = padded_tokens(init, lens, T, cfg["vocab"])
    targets = torch.zeros_like(ids)
    targets[:, :-1] = ids[:, 1:]  # already 0 wherever t+1 >= len

    model = TorchGPT(cfg)
    binding = model.binding()
    binding.load(params)
    logits = model(ids, lens)
    loss = F.cross_entropy(logits.reshape(-1, cfg["vocab"]), targets.reshape(-1), ignore_index=0)
    loss.backward()

    inputs = {"ids": ids, "lens": torch.tensor(lens), "targets": targets}
    outputs = {"logits": logits, "loss": loss.reshape(1)}
    meta = {"model_config": json.dumps(model_config, sort_keys=True),
            "reference": "reference.py TorchGPT(gpt_config(model_config)): RMSNorm and SwiGLU "
                         "from plain torch ops, " + (
                             "GroupedRopeAttention (plain torch ops: repeat_interleave of the "
                             "kv_heads, rotary positions" + (", T5's relative bias" if cfg["rel_buckets"]
                                                             else "") + ")"
                             if cfg["kv_heads"] or cfg["rope_base"] or cfg["rel_buckets"]
                             else "nn.MultiheadAttention(bias=bias)"),
            "batch": 2, "seq_len": T, "mask": "causal+key_padding",
            "loss": "cross_entropy(logits.reshape(-1,V), targets.reshape(-1), ignore_index=0)"}
    write(filename, model_record(params, binding.grads(), inputs, outputs), meta)


# ---------------------------------------------------------------------------
# 4: standalone layers
# ---------------------------------------------------------------------------

def layer_case(case, module_binding, params, inputs, outputs, input_grads):
    """Record one layer case as <case>.param.*, <case>.in.*, <case>.out.*, <case>.grad.*."""
    rec = {}
    for k, v in params.items():
        rec[f"{case}.param.{k}"] = v
    for k, v in inputs.items():
        rec[f"{case}.in.{k}"] = v
    for k, v in outputs.items():
        rec[f"{case}.out.{k}"] = v
    grads = dict(input_grads)
    if module_binding is not None:
        grads.update(module_binding.grads())
    for k, v in grads.items():
        rec[f"{case}.grad.{k}"] = v
    return rec


def make_layers(filename, seed):
    init = Init(seed)
    rec, meta = {}, {}

    # --- LayerNorm(8) on (3, 4, 8); loss = sum(y * upstream) ---
    params = {}
    init.layer_norm(params, "", 8)  # "weight", "bias"
    ln = nn.LayerNorm(8)  # eps 1e-5
    b = Binding()
    b.layer_norm("", ln)
    b.check_covers(ln)
    b.load(params)
    x = init.normal((3, 4, 8), 1.5).requires_grad_()
    up = init.normal((3, 4, 8))
    y = ln(x)
    (y * up).sum().backward()
    rec.update(layer_case("ln", b, params, {"x": x, "upstream": up}, {"y": y}, {"x": x.grad}))
    meta.update({"ln.d": 8, "ln.eps": 1e-5, "ln.loss": "sum(out.y * in.upstream)"})

    # --- MultiheadAttention cases ---
    def mha_module(d, h):
        m = nn.MultiheadAttention(d, h, dropout=0.0, bias=True, batch_first=True)
        b = Binding()
        b.mha("", m)
        b.check_covers(m)
        return m, b

    def mha_params(d):
        p = {}
        init.mha(p, "", d)  # "w_q.weight", "w_q.bias", ...
        return p

    # Self-attention: D=8, H=2, B=2, T=5, causal + key padding lengths [5, 3].
    d, h, B, T, lens = 8, 2, 2, 5, [5, 3]
    m, b = mha_module(d, h)
    params = mha_params(d)
    b.load(params)
    x = init.normal((B, T, d)).requires_grad_()
    up = init.normal((B, T, d))
    y, attn = m(x, x, x, key_padding_mask=key_padding_mask(lens, T), attn_mask=causal_mask(T),
                need_weights=True, average_attn_weights=False)
    (y * up).sum().backward()
    rec.update(layer_case("mha_self", b, params,
                          {"x": x, "lens": torch.tensor(lens), "upstream": up},
                          {"y": y, "attn": attn}, {"x": x.grad}))
    meta.update({"mha_self.d_model": d, "mha_self.heads": h, "mha_self.mask": "causal+key_padding",
                 "mha_self.lens": "key padding lengths (key j of batch b masked when j >= lens[b])",
                 "mha_self.attn": "per-head probabilities (B,H,T,T), not averaged",
                 "mha_self.loss": "sum(out.y * in.upstream)"})

    # Cross-attention: D=8, H=2, B=2, T=4 queries, S=6 keys, source key padding [6, 2].
    d, h, B, T, S, lens = 8, 2, 2, 4, 6, [6, 2]
    m, b = mha_module(d, h)
    params = mha_params(d)
    b.load(params)
    xq = init.normal((B, T, d)).requires_grad_()
    xkv = init.normal((B, S, d)).requires_grad_()
    up = init.normal((B, T, d))
    y, attn = m(xq, xkv, xkv, key_padding_mask=key_padding_mask(lens, S),
                need_weights=True, average_attn_weights=False)
    (y * up).sum().backward()
    rec.update(layer_case("mha_cross", b, params,
                          {"xq": xq, "xkv": xkv, "lens": torch.tensor(lens), "upstream": up},
                          {"y": y, "attn": attn}, {"xq": xq.grad, "xkv": xkv.grad}))
    meta.update({"mha_cross.d_model": d, "mha_cross.heads": h, "mha_cross.mask": "key_padding",
                 "mha_cross.lens": "source key padding lengths",
                 "mha_cross.attn": "per-head probabilities (B,H,T,S), not averaged",
                 "mha_cross.loss": "sum(out.y * in.upstream)"})

    # --- FeedForward D=8, F=16 on (2, 3, 8), ReLU and exact GELU ---
    for case, act in (("ffn_relu", nn.ReLU()), ("ffn_gelu", nn.GELU(approximate="none"))):
        ffn = nn.Sequential(nn.Linear(8, 16), act, nn.Linear(16, 8))
        b = Binding()
        b.linear("linear1", ffn[0])
        b.linear("linear2", ffn[2])
        b.check_covers(ffn)
        params = {}
        init.ffn(params, "", 8, 16)  # "linear1.weight", ...
        b.load(params)
        x = init.normal((2, 3, 8)).requires_grad_()
        up = init.normal((2, 3, 8))
        y = ffn(x)
        (y * up).sum().backward()
        rec.update(layer_case(case, b, params, {"x": x, "upstream": up}, {"y": y}, {"x": x.grad}))
        meta.update({f"{case}.d": 8, f"{case}.f": 16,
                     f"{case}.activation": "relu" if case == "ffn_relu" else "gelu (exact erf)",
                     f"{case}.loss": "sum(out.y * in.upstream)"})

    # --- Cross-entropy: logits (6, 5); ignore_index 0 (two rows), label smoothing 0.2 ---
    logits = init.normal((6, 5), 2.0).requires_grad_()
    targets = torch.tensor([3, 0, 1, 4, 0, 2])
    loss = F.cross_entropy(logits, targets, ignore_index=0, label_smoothing=0.2)
    loss.backward()
    rec.update(layer_case("ce", None, {}, {"logits": logits, "targets": targets},
                          {"loss": loss.reshape(1)}, {"logits": logits.grad}))
    meta.update({"ce.ignore_index": 0, "ce.label_smoothing": 0.2, "ce.reduction": "mean",
                 "ce.loss": "out.loss itself (upstream gradient 1)"})

    # Plain cross-entropy (no smoothing, nothing ignored, class 0 is a real target).
    logits = init.normal((6, 5), 2.0).requires_grad_()
    targets = torch.tensor([0, 4, 2, 2, 1, 3])
    loss = F.cross_entropy(logits, targets)
    loss.backward()
    rec.update(layer_case("ce_plain", None, {}, {"logits": logits, "targets": targets},
                          {"loss": loss.reshape(1)}, {"logits": logits.grad}))
    meta.update({"ce_plain.ignore_index": "none", "ce_plain.label_smoothing": 0.0,
                 "ce_plain.reduction": "mean"})

    meta["cases"] = "ln,mha_self,mha_cross,ffn_relu,ffn_gelu,ce,ce_plain"
    write(filename, rec, meta)


# ---------------------------------------------------------------------------
# 5: optimizers
# ---------------------------------------------------------------------------

OPTIMIZERS = {
    # key: (torch.optim class, keyword arguments)
    "adam": (torch.optim.Adam, dict(lr=0.01, betas=(0.9, 0.98), eps=1e-9)),
    "adam_l2": (torch.optim.Adam, dict(lr=0.01, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.1)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),  # betas (0.9, 0.999), eps 1e-8
    "sgd_mom": (torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
}


def make_adam(filename, seed):
    init = Init(seed)
    p0 = init.normal((2, 3))
    gs = [init.normal((2, 3)) for _ in range(3)]
    rec = {"p0": p0, "g1": gs[0], "g2": gs[1], "g3": gs[2]}
    meta = {"steps": 3, "protocol": "p = p0; for k in 1..3: p.grad = g_k; opt.step(); <key>.p<k> = p"}
    for key, (cls, kw) in OPTIMIZERS.items():
        p = p0.clone().requires_grad_()
        opt = cls([p], **kw)
        # Record every hyperparameter PyTorch actually used (defaults included).
        group = opt.param_groups[0]
        meta[f"{key}.optimizer"] = cls.__name__
        for hp in ("lr", "betas", "eps", "weight_decay", "amsgrad",
                   "momentum", "dampening", "nesterov"):
            if hp in group:
                val = group[hp]
                meta[f"{key}.{hp}"] = ",".join(map(str, val)) if isinstance(val, tuple) else val
        for k, g in enumerate(gs, start=1):
            p.grad = g.clone()
            opt.step()
            rec[f"{key}.p{k}"] = p.detach().clone()
    write(filename, rec, meta)


def sparse_pattern_mask(T, window, every):
    """(T, T) bool, True = hidden: qkv's SparsePattern (nn/attention.h). Query i sees
    key j when |i - j| < window, or j % every == 0 (a global key), or i % every == 0
    (a global query); the causal mask is added by the caller."""
    i = torch.arange(T).unsqueeze(1)
    j = torch.arange(T).unsqueeze(0)
    visible = ((i - j).abs() < window) | (j % every == 0) | (i % every == 0)
    return ~visible


def make_attention_kernels(filename, seed):
    """Sparse attention (qkv's AttentionKernel::Sparse) is dense attention with the
    pattern as a mask: PyTorch's nn.MultiheadAttention with that boolean attn_mask,
    causal and key padding added."""
    init = Init(seed)
    rec, meta = {}, {}
    d, h, B, T, lens, window, every = 8, 2, 2, 12, [12, 9], 3, 4
    m = nn.MultiheadAttention(d, h, dropout=0.0, bias=True, batch_first=True)
    b = Binding()
    b.mha("", m)
    b.check_covers(m)
    params = {}
    init.mha(params, "", d)
    b.load(params)
    x = init.normal((B, T, d)).requires_grad_()
    up = init.normal((B, T, d))
    mask = sparse_pattern_mask(T, window, every) | causal_mask(T)
    y, _ = m(x, x, x, key_padding_mask=key_padding_mask(lens, T), attn_mask=mask,
             need_weights=False)
    (y * up).sum().backward()
    rec.update(layer_case("mha_sparse", b, params,
                          {"x": x, "lens": torch.tensor(lens), "upstream": up},
                          {"y": y}, {"x": x.grad}))
    meta.update({"mha_sparse.d_model": d, "mha_sparse.heads": h,
                 "mha_sparse.window": window, "mha_sparse.global_every": every,
                 "mha_sparse.mask": "sparse pattern + causal + key_padding",
                 "mha_sparse.loss": "sum(out.y * in.upstream)", "cases": "mha_sparse"})
    write(filename, rec, meta)


# ---------------------------------------------------------------------------
# 7: the query/key head size d_k set apart from D / H, every kernel
# ---------------------------------------------------------------------------

# (case, kernel, d_k, cross, bias, causal, T, S, lens or None). D 16, H 2, d_v 8, B 2.
# "softmax" cases are the reference of the standard and memory-efficient kernels.
HEAD_SIZE_CASES = [
    ("self_dk3", "softmax", 3, False, True, True, 6, 6, [6, 4]),
    ("self_dk12", "softmax", 12, False, True, True, 6, 6, [6, 4]),
    ("cross_dk3", "softmax", 3, True, True, False, 5, 7, [7, 3]),
    ("cross_dk12", "softmax", 12, True, True, False, 5, 7, [7, 3]),
    ("self_dk12_nobias", "softmax", 12, False, False, True, 6, 6, None),
    ("sparse_dk3", "sparse", 3, False, True, True, 12, 12, [12, 9]),
    ("sparse_dk12", "sparse", 12, False, True, False, 12, 12, [12, 9]),
    ("linear_dk3", "linear", 3, False, True, True, 8, 8, [8, 5]),
    ("linear_dk12", "linear", 12, True, True, False, 5, 7, [7, 3]),
]
SPARSE_WINDOW, SPARSE_EVERY = 3, 4


def head_size_params(init, d, h, d_k, bias):
    """qkv's MultiHeadAttention(d, h, bias, g, d_k) names: w_q, w_k (h*d_k, d), w_v, w_o (d, d)."""
    p = {}
    for w, rows in (("w_q", h * d_k), ("w_k", h * d_k), ("w_v", d), ("w_o", d)):
        init.linear(p, w, d, rows, bias)
    return p


def check_plain_attention_against_torch(init):
    """The plain-ops reference equals nn.MultiheadAttention where both exist (d_k = D / H):
    output and every gradient, in float64. Nothing of this is written."""
    d, h, B, T, S, lens = 16, 2, 2, 5, 7, [7, 3]
    m = nn.MultiheadAttention(d, h, dropout=0.0, bias=True, batch_first=True)
    b = Binding()
    b.mha("", m)
    b.check_covers(m)
    params = head_size_params(init, d, h, d // h, True)
    b.load(params)
    xq, xkv, up = init.normal((B, T, d)), init.normal((B, S, d)), init.normal((B, T, d))
    mask = key_padding_mask(lens, S)
    y_t, attn_t = m(xq, xkv, xkv, key_padding_mask=mask, need_weights=True,
                    average_attn_weights=False)
    (y_t * up).sum().backward()
    p = {k: v.clone().requires_grad_() for k, v in params.items()}
    y, attn = plain_attention.softmax_attention(xq, xkv, p, h, mask[:, None, :])
    (y * up).sum().backward()
    torch_grads = b.grads()
    assert torch.allclose(y, y_t, atol=1e-12) and torch.allclose(attn, attn_t, atol=1e-12)
    for k in p:
        assert torch.allclose(p[k].grad, torch_grads[k], atol=1e-12), k


def make_attention_head_size(filename, seed):
    """Attention with d_k != D / H (qkv's AttentionOptions::d_k), every heads' kernel,
    from plain torch ops (plain_attention.py): Q, K have d_k columns per head, V and
    the head outputs d_v = D / H, scores scaled by 1 / sqrt(d_k)."""
    init = Init(seed)
    check_plain_attention_against_torch(init)
    d, h, B = 16, 2, 2
    rec = {}
    meta = {"d_model": d, "heads": h, "d_v": d // h, "sparse.window": SPARSE_WINDOW,
            "sparse.global_every": SPARSE_EVERY,
            "cases": ",".join(c[0] for c in HEAD_SIZE_CASES)}
    for case, kernel, d_k, cross, bias, causal, T, S, lens in HEAD_SIZE_CASES:
        params = head_size_params(init, d, h, d_k, bias)
        p = {k: v.clone().requires_grad_() for k, v in params.items()}
        xq = init.normal((B, T, d)).requires_grad_()
        xkv = init.normal((B, S, d)).requires_grad_() if cross else xq
        up = init.normal((B, T, d))
        mask = torch.zeros(B, T, S, dtype=torch.bool)  # (B,T,S), True = hidden
        if lens is not None:
            mask |= key_padding_mask(lens, S)[:, None, :]
        if causal:
            mask |= causal_mask(T)[None]
        if kernel == "sparse":
            mask |= sparse_pattern_mask(T, SPARSE_WINDOW, SPARSE_EVERY)[None]
        assert not mask.all(-1).any(), f"{case}: a query row sees no key"
        outputs = {}
        if kernel == "linear":
            y = plain_attention.linear_attention(xq, xkv, p, h, lens or [S] * B, causal)
            other = plain_attention.linear_attention_by_scores(xq, xkv, p, h, mask)
            assert torch.allclose(y, other, atol=1e-12), case
        else:
            y, attn = plain_attention.softmax_attention(xq, xkv, p, h, mask)
            if kernel == "softmax":
                outputs["attn"] = attn
        outputs["y"] = y
        (y * up).sum().backward()
        inputs = {"xq": xq, "xkv": xkv} if cross else {"x": xq}
        input_grads = {k: v.grad for k, v in inputs.items()}
        if lens is not None:
            inputs["lens"] = torch.tensor(lens)
        inputs["upstream"] = up
        grads = {k: v.grad for k, v in p.items()}
        rec.update(layer_case(case, None, params, inputs, outputs, {**input_grads, **grads}))
        masks = (["causal"] if causal else []) + (["key_padding"] if lens else [])
        meta.update({f"{case}.kernel": kernel, f"{case}.d_k": d_k,
                     f"{case}.bias": str(bias).lower(), f"{case}.mask": "+".join(masks),
                     f"{case}.T": T, f"{case}.S": S})
    meta.update(loss="sum(<case>.out.y * <case>.in.upstream)",
                kernels="softmax: standard and memory-efficient; sparse: the pattern as a mask; "
                        "linear: phi = elu + 1, no scale")
    write(filename, rec, meta)


def rms_norm_reference(x, weight, eps):
    """RMSNorm (Zhang and Sennrich) from plain torch ops: PyTorch 1.13 has no
    module for it. y = x / sqrt(mean(x^2) + eps) * weight, over the last dim."""
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def make_rmsnorm(filename, seed):
    """nn::RMSNorm and add_rms_norm (the Post-LN residual fusion) against
    rms_norm_reference in float64; loss = sum(y * upstream)."""
    init = Init(seed)
    rec, eps, d = {}, 1e-6, 8
    # A non-zero mean per row (x + 1.5): RMSNorm keeps it, and a kernel that
    # subtracted it, as LayerNorm does, would fail the comparison.
    weight = f32_exact(1.0 + init.normal((d,), 0.5)).requires_grad_()
    x = f32_exact(init.normal((3, 4, d)) + 1.5).requires_grad_()
    up = init.normal((3, 4, d))
    y = rms_norm_reference(x, weight, eps)
    (y * up).sum().backward()
    rec.update(layer_case("rms", None, {"weight": weight.detach()},
                          {"x": x, "upstream": up}, {"y": y},
                          {"x": x.grad, "weight": weight.grad}))
    weight2 = f32_exact(1.0 + init.normal((d,), 0.5)).requires_grad_()
    a = init.normal((2, 5, d)).requires_grad_()
    b = init.normal((2, 5, d)).requires_grad_()
    up2 = init.normal((2, 5, d))
    y2 = rms_norm_reference(a + b, weight2, eps)
    (y2 * up2).sum().backward()
    rec.update(layer_case("add_rms", None, {"weight": weight2.detach()},
                          {"a": a, "b": b, "upstream": up2}, {"y": y2},
                          {"a": a.grad, "b": b.grad, "weight": weight2.grad}))
    meta = {"d": d, "eps": eps, "loss": "sum(<case>.out.y * <case>.in.upstream)",
            "reference": "x * rsqrt(mean(x^2) + eps) * weight, plain torch ops in float64"}
    write(filename, rec, meta)


def swiglu_reference(x, w_gate, w_up, w_down):
    """SwiGLU (Shazeer 2020; Llama's feed-forward) from plain torch ops: PyTorch
    1.13 has no module for it. y = (silu(x Wg^T) * (x Wu^T)) Wd^T, no biases."""
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def make_swiglu(filename, seed):
    """nn::SwiGLU against swiglu_reference in float64; loss = sum(y * upstream)."""
    init = Init(seed)
    d, f = 8, 16
    params = {"gate.weight": init.normal((f, d), 0.8), "up.weight": init.normal((f, d), 0.8),
              "down.weight": init.normal((d, f), 0.5)}
    p = {k: v.clone().requires_grad_() for k, v in params.items()}
    x = init.normal((2, 5, d)).requires_grad_()
    up = init.normal((2, 5, d))
    y = swiglu_reference(x, p["gate.weight"], p["up.weight"], p["down.weight"])
    (y * up).sum().backward()
    rec = layer_case("swiglu", None, params, {"x": x, "upstream": up}, {"y": y},
                     {"x": x.grad, **{k: v.grad for k, v in p.items()}})
    write(filename, rec, {"d": d, "f": f, "loss": "sum(swiglu.out.y * swiglu.in.upstream)",
                          "reference": "(silu(x Wg^T) * (x Wu^T)) Wd^T, plain torch ops in float64"})


def moe_reference(x, router_w, experts, k, capacity_factor, act):
    """A mixture of experts (Shazeer 2017; the Switch Transformer) from plain
    torch ops, as nn::MoE computes it: P = softmax(x Wr^T); each token's top k
    (ties to the lower index); gates P / (sum of the chosen P) for k >= 2, P for
    k = 1; capacity ceil(cf N k / E) claimed by rank, then token; a dropped
    assignment adds nothing; aux = E sum_e f_e mean_n P_ne, f_e the share of
    the N k assignments the router chose for e. experts: per expert
    (w1, b1, w2, b2). Returns y (x's shape), aux, and the number dropped."""
    d = x.shape[-1]
    xs = x.reshape(-1, d)
    n, e_count = xs.shape[0], router_w.shape[0]
    p = torch.softmax(xs @ router_w.T, dim=-1)
    # the top k by value, ties to the lower index (a stable sort of -p)
    order = torch.sort(-p.detach(), dim=-1, stable=True).indices[:, :k]
    chosen = torch.zeros(n, e_count)
    chosen.scatter_(1, order, 1.0)
    capacity = math.ceil(capacity_factor * n * k / e_count)
    kept = torch.zeros(n, e_count)
    used = [0] * e_count
    dropped = 0
    for r in range(k):
        for t in range(n):
            e = int(order[t, r])
            if used[e] < capacity:
                used[e] += 1
                kept[t, e] = 1.0
            else:
                dropped += 1
    pc = p * chosen
    gates = pc if k == 1 else pc / pc.sum(dim=-1, keepdim=True)
    y = torch.zeros_like(xs)
    for e, (w1, b1, w2, b2) in enumerate(experts):
        h = xs @ w1.T + b1
        h = torch.relu(h) if act == "relu" else F.gelu(h)
        y = y + (gates * kept)[:, e:e + 1] * (h @ w2.T + b2)
    f = chosen.sum(dim=0) / (n * k)
    aux = e_count * (f * p.mean(dim=0)).sum()
    return y.reshape(x.shape), aux, dropped, p.detach()


def make_moe(filename, seed):
    """nn::MoE (gelu experts, E 4, k 2, capacity factor 1: some assignments
    dropped) against moe_reference in float64; loss = sum(y * upstream) + 0.5 aux."""
    init = Init(seed)
    d, f, e_count, k, cf = 8, 12, 4, 2, 1.0
    for attempt in range(100):
        params = {"router.weight": init.normal((e_count, d), 1.0)}
        for e in range(e_count):
            params[f"experts.{e}.linear1.weight"] = init.normal((f, d), 0.5)
            params[f"experts.{e}.linear1.bias"] = init.normal((f,), 0.1)
            params[f"experts.{e}.linear2.weight"] = init.normal((d, f), 0.5)
            params[f"experts.{e}.linear2.bias"] = init.normal((d,), 0.1)
        x = init.normal((2, 5, d))
        with torch.no_grad():
            _, _, dropped, p = moe_reference(x, params["router.weight"], [
                tuple(params[f"experts.{e}.{n}"] for n in
                      ("linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"))
                for e in range(e_count)], k, cf, "gelu")
        top = torch.sort(p, dim=-1, descending=True).values
        # float32 routes as float64 does: no near-tie at the k-th choice, and
        # the capacity drops some assignments (the case the fixture is for)
        if float((top[:, k - 1] - top[:, k]).min()) > 1e-3 and dropped > 0:
            break
    else:
        raise SystemExit("make_moe: no draw of 100 without a near-tie and with a drop")
    p = {k_: v.clone().requires_grad_() for k_, v in params.items()}
    x = x.requires_grad_()
    up = init.normal((2, 5, d))
    experts = [tuple(p[f"experts.{e}.{n}"] for n in
                     ("linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"))
               for e in range(e_count)]
    y, aux, dropped, _ = moe_reference(x, p["router.weight"], experts, k, cf, "gelu")
    ((y * up).sum() + 0.5 * aux).backward()
    rec = layer_case("moe", None, params, {"x": x, "upstream": up},
                     {"y": y, "aux": aux.reshape(1), "dropped": torch.tensor([float(dropped)])},
                     {"x": x.grad, **{k_: v.grad for k_, v in p.items()}})
    write(filename, rec, {"d": d, "f": f, "experts": e_count, "experts_per_token": k,
                          "capacity_factor": cf, "activation": "gelu",
                          "loss": "sum(moe.out.y * moe.in.upstream) + 0.5 * moe.out.aux",
                          "reference": "moe_reference: plain torch ops in float64"})


def rope_reference(x, heads, pos0, base=10000.0):
    """Rotary position embedding as Meta's Llama writes it: each head's adjacent
    pairs (x_2i, x_2i+1) as complex numbers, times exp(i (pos0 + t) theta_i),
    theta_i = base^(-2i / d_k). x (B, T, H*d_k), float64."""
    B, T, E = x.shape
    d_k = E // heads
    theta = base ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)  # (d_k/2)
    angles = torch.outer(torch.arange(pos0, pos0 + T, dtype=torch.float64), theta)  # (T, d_k/2)
    rot = torch.polar(torch.ones_like(angles), angles)  # exp(i angle)
    xc = torch.view_as_complex(x.reshape(B, T, heads, d_k // 2, 2))
    return torch.view_as_real(xc * rot[None, :, None, :]).reshape(B, T, E)


def make_rope(filename, seed):
    """nn::rope against rope_reference in float64; loss = sum(y * upstream)."""
    init = Init(seed)
    x = init.normal((2, 6, 2 * 8)).requires_grad_()
    up = init.normal((2, 6, 2 * 8))
    y = rope_reference(x, heads=2, pos0=5)
    (y * up).sum().backward()
    rec = layer_case("rope", None, {}, {"x": x, "upstream": up}, {"y": y}, {"x": x.grad})
    write(filename, rec, {"heads": 2, "pos0": 5, "base": 10000,
                          "loss": "sum(rope.out.y * rope.in.upstream)",
                          "reference": "pairs as complex numbers times exp(i t theta), float64"})


# ---------------------------------------------------------------------------
# 8: grouped-query attention and rotary positions inside attention
# ---------------------------------------------------------------------------

# (case, kv_heads, rope_base or 0, pos0, cross, bias, causal, T, S, lens or None).
# D 16, H 4, d_k = d_v = 4, B 2. The reference of the standard and memory-efficient kernels.
GQA_ROPE_CASES = [
    ("mqa", 1, 0, 0, False, True, True, 6, 6, [6, 4]),
    ("gqa2", 2, 0, 0, False, True, False, 6, 6, [6, 3]),
    ("rope", 4, 10000, 0, False, True, True, 6, 6, [6, 4]),
    ("gqa2_rope", 2, 10000, 3, False, True, True, 6, 6, [5, 6]),
    ("mqa_rope_nobias", 1, 100, 0, False, False, True, 6, 6, None),
    ("cross_gqa2", 2, 0, 0, True, True, False, 5, 7, [7, 3]),
]


def gqa_rope_attention(xq, xkv, p, heads, kv_heads, rope_base, pos0, mask):
    """Grouped-query attention (Ainslie et al.) with Llama's rotary positions, in
    plain torch ops: Q (B,T,H*d_k), K (B,S,K*d_k), V (B,S,K*d_v) projected; Q and K
    rotated by rope_reference at positions pos0 + t (rope_base 0: no rotation);
    each key/value head repeated for the H/K query heads of its group with
    repeat_interleave (query head h reads key/value head h // (H/K)); then
    softmax attention as plain_attention.softmax_attention."""
    pa = plain_attention
    q, k, v = pa.project(xq, p, "w_q"), pa.project(xkv, p, "w_k"), pa.project(xkv, p, "w_v")
    if rope_base:
        q = rope_reference(q, heads, pos0, rope_base)
        k = rope_reference(k, kv_heads, pos0, rope_base)
    group = heads // kv_heads
    q = pa.split_heads(q, heads)  # (B,H,T,d_k)
    k = pa.split_heads(k, kv_heads).repeat_interleave(group, dim=1)  # (B,K,S,d_k) -> (B,H,S,d_k)
    v = pa.split_heads(v, kv_heads).repeat_interleave(group, dim=1)  # (B,K,S,d_v) -> (B,H,S,d_v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B,H,T,S)
    scores = scores.masked_fill(mask[:, None], float("-inf"))
    return pa.project(pa.merge_heads(torch.softmax(scores, dim=-1) @ v), p, "w_o")


def make_attention_gqa_rope(filename, seed):
    """Attention with kv_heads < heads (AttentionOptions::kv_heads) and rotary
    positions (AttentionOptions::rope_base), from plain torch ops in float64
    (gqa_rope_attention); loss = sum(y * upstream)."""
    init = Init(seed)
    d, h, B = 16, 4, 2
    d_k = d // h
    # The reference with every head its own (K = H, no rope) is softmax_attention.
    params = head_size_params(init, d, h, d_k, True)
    x, m = init.normal((B, 5, d)), torch.zeros(B, 5, 5, dtype=torch.bool)
    y0, _ = plain_attention.softmax_attention(x, x, params, h, m)
    assert torch.allclose(gqa_rope_attention(x, x, params, h, h, 0, 0, m), y0, atol=1e-12)
    rec = {}
    meta = {"d_model": d, "heads": h, "cases": ",".join(c[0] for c in GQA_ROPE_CASES)}
    for case, kv, base, pos0, cross, bias, causal, T, S, lens in GQA_ROPE_CASES:
        params = {}
        for w, rows in (("w_q", h * d_k), ("w_k", kv * d_k), ("w_v", kv * (d // h)), ("w_o", d)):
            init.linear(params, w, d, rows, bias)
        p = {k: v.clone().requires_grad_() for k, v in params.items()}
        xq = init.normal((B, T, d)).requires_grad_()
        xkv = init.normal((B, S, d)).requires_grad_() if cross else xq
        up = init.normal((B, T, d))
        mask = torch.zeros(B, T, S, dtype=torch.bool)  # (B,T,S), True = hidden
        if lens is not None:
            mask |= key_padding_mask(lens, S)[:, None, :]
        if causal:
            mask |= causal_mask(T)[None]
        y = gqa_rope_attention(xq, xkv, p, h, kv, base, pos0, mask)
        (y * up).sum().backward()
        inputs = {"xq": xq, "xkv": xkv} if cross else {"x": xq}
        input_grads = {k: v.grad for k, v in inputs.items()}
        if lens is not None:
            inputs["lens"] = torch.tensor(lens)
        inputs["upstream"] = up
        grads = {k: v.grad for k, v in p.items()}
        rec.update(layer_case(case, None, params, inputs, {"y": y}, {**input_grads, **grads}))
        masks = (["causal"] if causal else []) + (["key_padding"] if lens else [])
        meta.update({f"{case}.kv_heads": kv, f"{case}.rope_base": base, f"{case}.pos0": pos0,
                     f"{case}.bias": str(bias).lower(), f"{case}.mask": "+".join(masks)})
    meta.update(loss="sum(<case>.out.y * <case>.in.upstream)",
                reference="projections; rope_reference on Q (H heads) and K (kv_heads heads); "
                          "repeat_interleave of each key/value head over its group; softmax "
                          "attention; float64")
    write(filename, rec, meta)


# ---------------------------------------------------------------------------
# 9: T5's relative position bias inside attention
# ---------------------------------------------------------------------------

# relative_position_bucket and relative_bias: reference.py's (model_config
# rel_buckets), Hugging Face's T5 bucket function in float64.


# (case, kv_heads, bidirectional, buckets, max_distance, pos0, cross, causal, T, S, lens).
# D 16, H 4, d_k = d_v = 4, B 2, biases.
RELATIVE_CASES = [
    ("encoder", 4, True, 8, 6, 0, False, False, 7, 7, [7, 4]),
    ("decoder_gqa2", 2, False, 8, 6, 0, False, True, 7, 7, [7, 5]),
    ("t5_defaults", 4, True, 32, 128, 0, False, False, 40, 40, [40, 23]),
    ("offset", 1, False, 8, 6, 4, True, False, 3, 7, [7, 6]),
]


def make_attention_relative(filename, seed):
    """Attention with T5's relative position bias (AttentionOptions::rel_bias),
    from plain torch ops in float64: gqa_rope_attention's maths with
    relative_bias added to the scaled scores before the mask; loss =
    sum(y * upstream). Also the buckets of rel in [-300, 300] for T5's
    defaults, both kinds."""
    pa = plain_attention
    init = Init(seed)
    d, h, B = 16, 4, 2
    d_k = d // h
    rels = torch.arange(-300, 301)
    rec = {"buckets.in.rel": rels,
           "buckets.out.bidirectional": relative_position_bucket(rels, True, 32, 128),
           "buckets.out.causal": relative_position_bucket(rels, False, 32, 128)}
    # the formula in plain Python floats agrees with the tensor one everywhere
    for r in range(-300, 301):
        for bi in (True, False):
            nb = 16 if bi else 32
            n = abs(r) if bi else max(-r, 0)
            ex = nb // 2
            want = (nb if bi and r > 0 else 0) + (n if n < ex else min(
                nb - 1, ex + int(math.log(n / ex) / math.log(128 / ex) * (nb - ex))))
            got = rec["buckets.out.bidirectional" if bi else "buckets.out.causal"][r + 300]
            assert int(got) == want, (r, bi, int(got), want)
    meta = {"d_model": d, "heads": h, "cases": ",".join(c[0] for c in RELATIVE_CASES)}
    for case, kv, bi, nb, maxd, pos0, cross, causal, T, S, lens in RELATIVE_CASES:
        params = {}
        for w, rows in (("w_q", h * d_k), ("w_k", kv * d_k), ("w_v", kv * (d // h)), ("w_o", d)):
            init.linear(params, w, d, rows, True)
        params["rel_bias"] = init.normal((h, nb))
        p = {k: v.clone().requires_grad_() for k, v in params.items()}
        xq = init.normal((B, T, d)).requires_grad_()
        xkv = init.normal((B, S, d)).requires_grad_() if cross else xq
        up = init.normal((B, T, d))
        mask = torch.zeros(B, T, S, dtype=torch.bool)  # (B,T,S), True = hidden
        mask |= key_padding_mask(lens, S)[:, None, :]
        if causal:
            mask |= causal_mask(T)[None]
        q = pa.split_heads(pa.project(xq, p, "w_q"), h)  # (B,H,T,d_k)
        group = h // kv
        k = pa.split_heads(pa.project(xkv, p, "w_k"), kv).repeat_interleave(group, dim=1)
        v = pa.split_heads(pa.project(xkv, p, "w_v"), kv).repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (B,H,T,S)
        scores = scores + relative_bias(p["rel_bias"], T, S, pos0, bi, maxd)
        scores = scores.masked_fill(mask[:, None], float("-inf"))
        y = pa.project(pa.merge_heads(torch.softmax(scores, dim=-1) @ v), p, "w_o")
        (y * up).sum().backward()
        inputs = {"xq": xq, "xkv": xkv} if cross else {"x": xq}
        input_grads = {k: v.grad for k, v in inputs.items()}
        inputs["lens"] = torch.tensor(lens)
        inputs["upstream"] = up
        grads = {k: v.grad for k, v in p.items()}
        rec.update(layer_case(case, None, params, inputs, {"y": y}, {**input_grads, **grads}))
        meta.update({f"{case}.kv_heads": kv, f"{case}.bidirectional": str(bi).lower(),
                     f"{case}.buckets": nb, f"{case}.max_distance": maxd, f"{case}.pos0": pos0,
                     f"{case}.causal": str(causal).lower()})
    meta.update(loss="sum(<case>.out.y * <case>.in.upstream)",
                reference="projections; repeat_interleave of each key/value head over its "
                          "group; scores / sqrt(d_k) + rel_bias[:, bucket(j - i - pos0)] "
                          "(Hugging Face's T5 bucket function); mask; softmax; float64")
    write(filename, rec, meta)


# ---------------------------------------------------------------------------
# The Vision Transformer (models/vit.h)
# ---------------------------------------------------------------------------

def make_vit(filename, seed, model_config):
    """Two cases in one file:
      patch.*  nn::patch_embed against F.conv2d with kernel = stride = P (the
               weight (D, C*P*P) reshaped to (D, C, P, P)), 3 channels, a 2 x 3
               grid of 3 x 3 patches; y (B, N, D) = conv's output flattened
               row-major over the grid; loss = sum(y * upstream)
      model.*  a tiny ViT (reference.py's TorchViT, built from model_config)
               on pixels 0..255 scaled by 1/255, logits and every gradient of
               the mean cross-entropy over the labels (0 among them)."""
    init = Init(seed)
    rec = {}
    B, C, H, W, P, D = 2, 3, 6, 9, 3, 5
    weight = init.uniform((D, C * P * P), math.sqrt(6.0 / (C * P * P + D))).requires_grad_()
    bias = init.uniform((D,), 0.2).requires_grad_()
    images = init.uniform((B, C, H, W), 1.0).requires_grad_()
    y = F.conv2d(images, weight.view(D, C, P, P), bias, stride=P).flatten(2).transpose(1, 2)
    upstream = init.normal(tuple(y.shape))
    (y * upstream).sum().backward()
    rec.update({"patch.param.weight": weight.detach(), "patch.param.bias": bias.detach(),
                "patch.in.images": images.detach(), "patch.in.upstream": upstream,
                "patch.out.y": y, "patch.grad.images": images.grad,
                "patch.grad.weight": weight.grad, "patch.grad.bias": bias.grad})

    cfg = model_config
    d, c, p = cfg["d_model"], cfg["channels"], cfg["patch"]
    n = (cfg["image"] // p) ** 2
    params = {}
    init.linear(params, "patch", c * p * p, d)
    params["cls_token"] = init.normal((1, 1, d), 0.5)
    params["pos_embed"] = init.normal((n + 1, d), 0.3)
    for i in range(cfg["layers"]):
        init.encoder_layer(params, f"encoder.layers.{i}", d, cfg["d_ff"])
    init.layer_norm(params, "encoder.norm", d)
    init.linear(params, "head", d, cfg["classes"])
    model = TorchViT(cfg)
    model.train()  # dropout is 0; train mode keeps PyTorch off its inference fast path
    binding = model.binding()
    binding.load(params)
    batch = 3
    pixels = init.ints(0, 256, (batch, c * cfg["image"] * cfg["image"]))
    labels = torch.tensor([0, cfg["classes"] - 1, 2])
    logits = model(pixels.double().reshape(batch, c, cfg["image"], cfg["image"]) / 255.0)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    inputs = {"pixels": pixels, "labels": labels}
    outputs = {"logits": logits, "loss": loss.reshape(1)}
    for k, v in model_record(params, binding.grads(), inputs, outputs).items():
        rec["model." + k] = v
    meta = {"model_config": json.dumps(model_config, sort_keys=True),
            "patch": f"B {B}, C {C}, H {H}, W {W}, P {P}, D {D}: "
                     "F.conv2d(images, weight.view(D, C, P, P), bias, stride=P)"
                     ".flatten(2).transpose(1, 2)",
            "reference": "reference.py TorchViT(model_config): F.conv2d patches, torch.cat "
                         "class token, + pos_embed, nn.TransformerEncoderLayer (norm_first), "
                         "final LayerNorm, nn.Linear head on position 0",
            "batch": batch, "images": "pixels (B, C*H*W) 0..255, channel-row-column, / 255",
            "loss": "cross_entropy(logits, labels), mean over B"}
    write(filename, rec, meta)


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    make_seq2seq("seq2seq_postln.safetensors", seed=1, norm_first=False,
                 activation="relu", tied=False, label_smoothing=0.1)
    make_seq2seq("seq2seq_preln_tied.safetensors", seed=2, norm_first=True,
                 activation="gelu", tied=True, label_smoothing=0.0)
    make_gpt("gpt.safetensors", seed=3)
    # The llama block (--preset llama): RMSNorm, SwiGLU (d_ff 64 -> hidden 48), no biases.
    make_gpt_block("gpt_llama.safetensors", seed=11, model_config={
        "vocab": 13, "d_model": 16, "heads": 2, "layers": 2, "d_ff": 64, "max_positions": 16,
        "dropout": 0.0, "activation": "swiglu", "norm": "rms", "bias": False, "pre_norm": True,
        "tie_weights": True, "seed": 0, "attention": "standard", "window": 128,
        "global_every": 64, "scaled": True})
    # The llama block with grouped-query attention (2 key/value heads for 4
    # query heads) and rotary positions (no position table).
    make_gpt_block("gpt_llama_gqa_rope.safetensors", seed=12, model_config={
        "vocab": 13, "d_model": 16, "heads": 4, "layers": 2, "d_ff": 64, "max_positions": 16,
        "dropout": 0.0, "activation": "swiglu", "norm": "rms", "bias": False, "pre_norm": True,
        "tie_weights": True, "seed": 0, "attention": "standard", "window": 128,
        "global_every": 64, "scaled": True, "kv_heads": 2, "rope_base": 10000.0})
    # T5's relative positions in a gpt: one causal table (4 heads, 8 buckets,
    # max distance 6: T 8 reaches the logarithmic buckets), no position table.
    make_gpt_block("gpt_relative.safetensors", seed=16, model_config={
        "vocab": 13, "d_model": 16, "heads": 4, "layers": 2, "d_ff": 32, "max_positions": 16,
        "dropout": 0.0, "activation": "gelu", "pre_norm": True,
        "tie_weights": True, "seed": 0, "attention": "standard", "window": 128,
        "global_every": 64, "scaled": True, "rel_buckets": 8, "rel_max_distance": 6})
    # T5's relative positions in a seq2seq: one table per stack (2 heads, 8
    # buckets, max distance 6; encoder bidirectional, decoder causal, 2 layers
    # each), no sinusoids; Post-LN, LayerNorm, ReLU, biases, untied.
    make_seq2seq_block("seq2seq_relative.safetensors", seed=17, label_smoothing=0.1, model_config={
        "src_vocab": 11, "tgt_vocab": 11, "d_model": 16, "heads": 2, "encoder_layers": 2,
        "decoder_layers": 2, "d_ff": 32, "dropout": 0.0, "activation": "relu",
        "pre_norm": False, "tie_weights": False, "learned_positions": False,
        "max_positions": 512, "seed": 0, "attention": "standard", "window": 128,
        "global_every": 64, "scaled": True, "rel_buckets": 8, "rel_max_distance": 6})
    # T5's block (--preset t5): Pre-LN RMSNorm, ReLU, no biases, tied, relative positions.
    make_seq2seq_block("seq2seq_t5.safetensors", seed=18, label_smoothing=0.0, model_config={
        "src_vocab": 11, "tgt_vocab": 11, "d_model": 16, "heads": 4, "encoder_layers": 2,
        "decoder_layers": 1, "d_ff": 32, "dropout": 0.0, "activation": "relu", "norm": "rms",
        "bias": False, "pre_norm": True, "tie_weights": True, "learned_positions": False,
        "max_positions": 512, "seed": 0, "attention": "standard", "window": 128,
        "global_every": 64, "scaled": True, "rel_buckets": 8, "rel_max_distance": 6})
    # T5's relative positions in the encoder model: one bidirectional table
    # (4 heads, 8 buckets, max distance 6) shared by 2 Pre-LN layers.
    make_encoder_block("encoder_relative.safetensors", seed=19, model_config={
        "vocab": 11, "classes": 5, "d_model": 16, "heads": 4, "layers": 2, "d_ff": 32,
        "dropout": 0.0, "activation": "gelu", "pre_norm": True, "seed": 0,
        "attention": "standard", "window": 128, "global_every": 64, "scaled": True,
        "rel_buckets": 8, "rel_max_distance": 6})
    make_bert("bert_mlm.safetensors", seed=13, head="mlm")
    make_bert("bert_classify.safetensors", seed=14, head="classify")
    make_bert("bert_qa.safetensors", seed=15, head="qa")
    make_layers("layers.safetensors", seed=4)
    make_adam("adam.safetensors", seed=5)
    make_attention_kernels("attention_kernels.safetensors", seed=6)
    make_attention_head_size("attention_head_size.safetensors", seed=7)
    make_rmsnorm("rmsnorm.safetensors", seed=8)
    make_swiglu("swiglu.safetensors", seed=9)
    make_moe("moe.safetensors", seed=15)
    make_rope("rope.safetensors", seed=10)
    make_attention_gqa_rope("attention_gqa_rope.safetensors", seed=11)
    make_attention_relative("attention_relative.safetensors", seed=15)
    # A tiny ViT: 6 x 6 images of 2 channels in 3 x 3 patches (N 4, T 5).
    make_vit("vit.safetensors", seed=13, model_config={
        "image": 6, "channels": 2, "patch": 3, "classes": 5, "d_model": 16, "heads": 2,
        "layers": 2, "d_ff": 32, "dropout": 0.0, "activation": "gelu", "pre_norm": True,
        "seed": 0, "attention": "standard", "window": 128, "global_every": 64, "scaled": True})
    # The format page's proof: model files written by the standard-library
    # writer (format_writer.py) and their logits from the page's forward pass.
    format_reference.main()
    check_seq2seq_against_page("seq2seq_relative")


def check_seq2seq_against_page(case):
    """reference.py's TorchSeq2Seq (PyTorch's modules and plain torch ops)
    against format_reference.py's seq2seq (the format page's maths alone) on
    the page's model file `case`, in float64: two independent PyTorch
    definitions of qkv's seq2seq, here with T5's relative positions, must
    give the same logits before either becomes a fixture's reference."""
    tensors, md = st.load_file(os.path.join(OUT_DIR, f"format_{case}.safetensors"))
    c = json.loads(md["model_config"])
    P = {n: torch.from_numpy(t.astype(np.float64)) for n, t in tensors.items()}
    x = format_reference.INPUTS[case]
    model = TorchSeq2Seq(seq2seq_config(c))
    model.binding().load(P)
    with torch.no_grad():
        page = format_reference.seq2seq(P, c, x)
        ours = model(torch.tensor(x["src"]), x["src_lens"], torch.tensor(x["tgt"]),
                     x["tgt_lens"])[0]
    rows = ~key_padding_mask(x["tgt_lens"], page.shape[1])  # (B, T): real target rows
    diff = (ours - page)[rows].abs().max().item()
    assert diff < 1e-12, f"{case}: TorchSeq2Seq and format_reference.seq2seq differ by {diff}"
    print(f"checked {case}: TorchSeq2Seq == format_reference.seq2seq (max |diff| {diff:.1e})")


if __name__ == "__main__":
    main()
