#!/usr/bin/env python3
"""Model files and training checkpoints written from docs/checkpoint-format.md alone.

Python's standard library only (struct, json, random): no qkv code, no numpy,
no torch. Every name, shape, order and key below is one the page states; a
fact the page gets wrong or leaves out makes qkv refuse these files, or
compute other logits than the PyTorch model that format_reference.py builds
from the page and the same weights (tests/test_format_page.cpp).

    python3 tests/pytorch/format_writer.py DIR

writes, for each case in CASES (two per model family, each with its own
norm placement, positions, head, activation and attention kernel, two
with the block keys norm, activation swiglu and bias, one with the
attention keys kv_heads and rope_base, and two with the mixture-of-experts
keys experts, experts_per_token, capacity_factor and aux_loss):

    DIR/format_<case>.safetensors         a model file (no prefix; with vocab, but a vit)
    DIR/format_<case>.ckpt.safetensors    a training checkpoint of the same
                                          weights, at step STEP, with the
                                          optimizer state the page lists
    DIR/format_gpt_bpe.safetensors        a gpt model file with a BPE tokenizer
                                          (the page's `bpe` key and vocab mapping)

and the data the bert and vit checkpoints name (the page's "The data a
checkpoint names"), which they record with its hash:

    DIR/format_bert_mlm.txt               a corpus of words, one line a sequence
    DIR/format_bert_classify.tsv          text<TAB>label and text<TAB>text<TAB>label lines
    DIR/format_images/                    MNIST's IDX files, gzipped: gray 6 x 6 images

The same arguments give the same bytes (the weights are drawn from a seeded
random.Random). tests/fixtures/ holds the model files (`make fixtures`);
tests/cli/format_page.sh writes everything anew, compares the model files
with those, and has the trainer evaluate, answer and resume from them
(the 2-channel vit it refuses: the trainer reads gray images).
"""

import gzip
import io
import json
import math
import os
import random
import struct
import sys

STEP = 4  # the training checkpoints' step count
SYMBOLS = 6  # the task's symbols: the vocabulary is <pad> <s> </s> a b c d e f
VOCAB = ["<pad>", "<s>", "</s>"] + [chr(ord("a") + k) for k in range(SYMBOLS)]

# One case per family. `config` is the page's model_config for the family
# (every field, with its JSON type); `run` the train_config keys of the
# checkpoint that differ between the cases.
CASES = {
    # encoder-decoder: Post-LN, tied output layer, sinusoidal positions, ReLU,
    # standard attention with a query/key head size set apart (d_k 4, not 16/2).
    "seq2seq": {
        "kind": "seq2seq",
        "config": {"src_vocab": len(VOCAB), "tgt_vocab": len(VOCAB), "d_model": 16,
                   "heads": 2, "encoder_layers": 1, "decoder_layers": 1, "d_ff": 32,
                   "dropout": 0.0, "activation": "relu", "pre_norm": False,
                   "tie_weights": True, "learned_positions": False, "max_positions": 512,
                   "seed": 1, "attention": "standard", "window": 128, "global_every": 64,
                   "scaled": True, "d_k": 4},
        "run": {"optimizer": "adam", "weight_decay": 0.0, "context": 6},
        "seed": 11,
    },
    # decoder-only: Pre-LN (final norm), untied lm_head, GELU, the linear kernel.
    "gpt": {
        "kind": "gpt",
        "config": {"vocab": len(VOCAB), "d_model": 16, "heads": 2, "layers": 2, "d_ff": 32,
                   "max_positions": 16, "dropout": 0.0, "activation": "gelu",
                   "pre_norm": True, "tie_weights": False, "seed": 1,
                   "attention": "linear", "window": 128, "global_every": 64, "scaled": True},
        "run": {"optimizer": "adamw", "weight_decay": 0.01, "context": 16},
        "seed": 12,
    },
    # encoder-only: Post-LN, ReLU, sparse attention (window 2, a global
    # position every 3) without the 1/sqrt(d_k) scale.
    "encoder": {
        "kind": "encoder",
        "config": {"vocab": len(VOCAB), "classes": len(VOCAB), "d_model": 16, "heads": 2,
                   "layers": 2, "d_ff": 32, "dropout": 0.0, "activation": "relu",
                   "pre_norm": False, "seed": 1, "attention": "sparse", "window": 2,
                   "global_every": 3, "scaled": False},
        "run": {"optimizer": "sgd", "weight_decay": 0.0, "context": 5},
        "seed": 13,
    },
    # The branches the three above leave out. encoder-decoder: Pre-LN (each
    # stack's final norm), learned positions, an untied lm_head, GELU, sparse
    # self-attention (cross-attention keeps the standard maths).
    "seq2seq_preln": {
        "kind": "seq2seq",
        "config": {"src_vocab": len(VOCAB), "tgt_vocab": len(VOCAB), "d_model": 16,
                   "heads": 4, "encoder_layers": 2, "decoder_layers": 2, "d_ff": 24,
                   "dropout": 0.1, "activation": "gelu", "pre_norm": True,
                   "tie_weights": False, "learned_positions": True, "max_positions": 8,
                   "seed": 1, "attention": "sparse", "window": 2, "global_every": 3,
                   "scaled": True},
        "run": {"optimizer": "adam", "weight_decay": 0.0, "context": 8},
        "seed": 14,
    },
    # decoder-only: Post-LN (no final norm), the head tied to tok_embed,
    # sparse attention under the causal mask.
    "gpt_tied": {
        "kind": "gpt",
        "config": {"vocab": len(VOCAB), "d_model": 16, "heads": 2, "layers": 1, "d_ff": 32,
                   "max_positions": 16, "dropout": 0.0, "activation": "relu",
                   "pre_norm": False, "tie_weights": True, "seed": 1,
                   "attention": "sparse", "window": 2, "global_every": 4, "scaled": True},
        "run": {"optimizer": "adam", "weight_decay": 0.0, "context": 16},
        "seed": 15,
    },
    # encoder-only: Pre-LN (a final norm), GELU, d_k 12 (not 16/4).
    "encoder_preln": {
        "kind": "encoder",
        "config": {"vocab": len(VOCAB), "classes": len(VOCAB), "d_model": 16, "heads": 4,
                   "layers": 1, "d_ff": 32, "dropout": 0.0, "activation": "gelu",
                   "pre_norm": True, "seed": 1, "attention": "standard", "window": 128,
                   "global_every": 64, "scaled": True, "d_k": 12},
        "run": {"optimizer": "adam", "weight_decay": 0.0, "context": 5},
        "seed": 16,
    },
    # The block keys. decoder-only: the llama block (--preset llama): Pre-LN
    # with RMSNorm (the final norm too), SwiGLU (d_ff 32: hidden 24), no
    # biases, the head tied.
    "gpt_llama": {
        "kind": "gpt",
        "config": {"vocab": len(VOCAB), "d_model": 16, "heads": 2, "layers": 2, "d_ff": 32,
                   "max_positions": 16, "dropout": 0.0, "activation": "swiglu",
                   "pre_norm": True, "tie_weights": True, "seed": 1, "attention": "standard",
                   "window": 128, "global_every": 64, "scaled": True, "norm": "rms",
                   "bias": False},
        "run": {"optimizer": "adamw", "weight_decay": 0.01, "context": 16},
        "seed": 17,
    },
    # encoder-decoder: Post-LN with RMSNorm (the residual sum inside the
    # norm), GELU, no biases in attention and feed-forward (lm_head keeps its).
    "seq2seq_rms": {
        "kind": "seq2seq",
        "config": {"src_vocab": len(VOCAB), "tgt_vocab": len(VOCAB), "d_model": 16,
                   "heads": 2, "encoder_layers": 1, "decoder_layers": 1, "d_ff": 32,
                   "dropout": 0.0, "activation": "gelu", "pre_norm": False,
                   "tie_weights": False, "learned_positions": False, "max_positions": 512,
                   "seed": 1, "attention": "standard", "window": 128, "global_every": 64,
                   "scaled": True, "norm": "rms", "bias": False},
        "run": {"optimizer": "adam", "weight_decay": 0.0, "context": 6},
        "seed": 18,
    },
    # The attention keys. decoder-only: grouped-query attention (4 query
    # heads share 2 key/value heads: w_k (2*6, 16), w_v (2*4, 16)) with d_k
    # set apart, rotary positions (no pos_embed), biases (w_k.bias (12),
    # w_v.bias (8)), LayerNorm, GELU, Pre-LN, untied head.
    "gpt_gqa_rope": {
        "kind": "gpt",
        "config": {"vocab": len(VOCAB), "d_model": 16, "heads": 4, "layers": 2, "d_ff": 32,
                   "max_positions": 16, "dropout": 0.0, "activation": "gelu",
                   "pre_norm": True, "tie_weights": False, "seed": 1, "attention": "standard",
                   "window": 128, "global_every": 64, "scaled": True, "d_k": 6,
                   "kv_heads": 2, "rope_base": 100.0},
        "run": {"optimizer": "adam", "weight_decay": 0.0, "context": 16},
        "seed": 19,
    },
    # T5's relative positions: one table per stack (encoder.rel_bias
    # bidirectional, decoder.rel_bias causal, each shared by 2 layers), no
    # positions added; Pre-LN, ReLU; 8 buckets, max distance 6, so 9 target
    # rows reach the last bucket.
    "seq2seq_relative": {
        "kind": "seq2seq",
        "config": {"src_vocab": len(VOCAB), "tgt_vocab": len(VOCAB), "d_model": 16,
                   "heads": 2, "encoder_layers": 2, "decoder_layers": 2, "d_ff": 32,
                   "dropout": 0.0, "activation": "relu", "pre_norm": True,
                   "tie_weights": False, "learned_positions": False, "max_positions": 512,
                   "seed": 1, "attention": "standard", "window": 128, "global_every": 64,
                   "scaled": True, "rel_buckets": 8, "rel_max_distance": 6},
        "run": {"optimizer": "adam", "weight_decay": 0.0, "context": 9},
        "seed": 21,
    },
    # The mixture-of-experts keys. decoder-only: every layer's FFN is a router
    # (4, 16) and 4 GELU experts with biases; each token goes to its 2 best
    # experts, gated by their renormalised probabilities. The capacity factor
    # 0.5 drops assignments in a training step and none at inference: the
    # page's proof compares the logits of both.
    "gpt_moe": {
        "kind": "gpt",
        "config": {"vocab": len(VOCAB), "d_model": 16, "heads": 2, "layers": 2, "d_ff": 16,
                   "max_positions": 16, "dropout": 0.0, "activation": "gelu",
                   "pre_norm": True, "tie_weights": False, "seed": 1, "attention": "standard",
                   "window": 128, "global_every": 64, "scaled": True, "experts": 4,
                   "experts_per_token": 2, "capacity_factor": 0.5, "aux_loss": 0.01},
        "run": {"optimizer": "adam", "weight_decay": 0.0, "context": 16},
        "seed": 23,
    },
    # One expert a token (k = 1, the Switch Transformer): its gate is the
    # router's raw probability, not 1. 3 SwiGLU experts (d_ff 24: hidden 16),
    # no biases, Post-LN with RMSNorm, the head tied.
    "gpt_moe_top1": {
        "kind": "gpt",
        "config": {"vocab": len(VOCAB), "d_model": 16, "heads": 2, "layers": 1, "d_ff": 24,
                   "max_positions": 16, "dropout": 0.0, "activation": "swiglu",
                   "pre_norm": False, "tie_weights": True, "seed": 1, "attention": "standard",
                   "window": 128, "global_every": 64, "scaled": True, "norm": "rms",
                   "bias": False, "experts": 3, "experts_per_token": 1,
                   "capacity_factor": 1.0, "aux_loss": 0.02},
        "run": {"optimizer": "adamw", "weight_decay": 0.01, "context": 16},
        "seed": 24,
    },
    # bert, head mlm: Post-LN, GELU, the output layer tied to embed.weight
    # plus mlm.bias; the optional keys classes and mask_id left out (so id 3,
    # "a", is the mask token). Its checkpoint learned from a corpus of words
    # b..f, one line a sequence (DATA below).
    "bert_mlm": {
        "kind": "bert",
        "config": {"vocab": len(VOCAB), "max_positions": 12, "head": "mlm", "d_model": 16,
                   "heads": 2, "layers": 2, "d_ff": 32, "dropout": 0.1, "activation": "gelu",
                   "pre_norm": False, "seed": 1, "attention": "standard", "window": 128,
                   "global_every": 64, "scaled": True, "segments": 2, "sep_id": 2},
        "run": {"optimizer": "adamw", "weight_decay": 0.01, "context": 12, "objective": "mlm",
                "format": "text", "tokens": "word", "line_by_line": True},
        "seed": 20,
    },
    # bert, head classify: Pre-LN (encoder.norm), ReLU, 3 segment rows (ids
    # 0 and 1 used), 4 classes. Its checkpoint learned from text<TAB>label
    # lines (and text<TAB>text<TAB>label), its labels named (metadata labels).
    "bert_classify": {
        "kind": "bert",
        "config": {"vocab": len(VOCAB), "max_positions": 10, "head": "classify", "d_model": 16,
                   "heads": 4, "layers": 1, "d_ff": 24, "dropout": 0.0, "activation": "relu",
                   "pre_norm": True, "seed": 1, "attention": "standard", "window": 128,
                   "global_every": 64, "scaled": True, "segments": 3, "classes": 4,
                   "sep_id": 2, "mask_id": 3},
        "run": {"optimizer": "adam", "weight_decay": 0.0, "context": 10, "objective": "classify",
                "format": "tsv", "tokens": "word"},
        "labels": ["w", "x", "y", "z"],
        "seed": 21,
    },
    # bert, head qa: start and end logits (qa_outputs), Post-LN, GELU, 1
    # layer. Its checkpoint learned from SQuAD JSON (a context of words,
    # each question's answer one of them), read in windows of 12 tokens
    # overlapping by doc_stride 2.
    "bert_qa": {
        "kind": "bert",
        "config": {"vocab": len(VOCAB), "max_positions": 12, "head": "qa", "d_model": 16,
                   "heads": 2, "layers": 1, "d_ff": 24, "dropout": 0.0, "activation": "gelu",
                   "pre_norm": False, "seed": 1, "attention": "standard", "window": 128,
                   "global_every": 64, "scaled": True, "segments": 2, "sep_id": 2},
        "run": {"optimizer": "adam", "weight_decay": 0.0, "context": 12, "objective": "qa",
                "format": "squad", "tokens": "word", "doc_stride": 2, "max_answer_tokens": 30},
        "seed": 22,
    },
    # The Vision Transformer: 6 x 6 images of 2 channels in 3 x 3 patches (4
    # patches + the class token), Pre-LN, GELU, 3 classes. The trainer reads
    # IDX images of one channel: it refuses this checkpoint (the library
    # reads both files).
    "vit": {
        "kind": "vit",
        "config": {"image": 6, "channels": 2, "patch": 3, "classes": 3, "d_model": 16,
                   "heads": 2, "layers": 2, "d_ff": 32, "dropout": 0.0, "activation": "gelu",
                   "pre_norm": True, "seed": 1, "attention": "standard", "window": 128,
                   "global_every": 64, "scaled": True},
        "run": {"optimizer": "adam", "weight_decay": 0.0, "context": 5, "format": "idx"},
        "seed": 20,
    },
    # A vit of gray images, as the trainer reads them (IDX): 6 x 6 pixels in
    # 2 x 2 patches (9 patches + the class token), Post-LN, ReLU, 3 classes.
    "vit_gray": {
        "kind": "vit",
        "config": {"image": 6, "channels": 1, "patch": 2, "classes": 3, "d_model": 16,
                   "heads": 2, "layers": 1, "d_ff": 24, "dropout": 0.0, "activation": "relu",
                   "pre_norm": False, "seed": 1, "attention": "standard", "window": 128,
                   "global_every": 64, "scaled": True},
        "run": {"optimizer": "adamw", "weight_decay": 0.01, "context": 10, "format": "idx"},
        "seed": 22,
    },
}


# ---------------------------------------------------------------------------
# The parameters, in named_parameters() order (the page's lists)
# ---------------------------------------------------------------------------

def linear(prefix, n_in, n_out, bias=True):
    out = [(prefix + ".weight", [n_out, n_in])]
    if bias:
        out.append((prefix + ".bias", [n_out]))
    return out


def norm(prefix, c):
    """A LayerNorm (gain, then bias) or, with norm "rms", an RMSNorm (gain alone)."""
    d = c["d_model"]
    if c.get("norm", "layer") == "rms":
        return [(prefix + ".weight", [d])]
    return [(prefix + ".weight", [d]), (prefix + ".bias", [d])]


def attention(prefix, c, self_attention=True):
    d, h, bias = c["d_model"], c["heads"], c.get("bias", True)
    dk = c.get("d_k", d // h)
    e = h * dk  # w_q: (heads * d_k, d_model)
    # kv_heads K (self-attention only): w_k (K * d_k, D), w_v (K * d_v, D), d_v = D / heads
    k = c.get("kv_heads", h) if self_attention else h
    return (linear(prefix + ".w_q", d, e, bias) + linear(prefix + ".w_k", d, k * dk, bias) +
            linear(prefix + ".w_v", d, k * (d // h), bias) + linear(prefix + ".w_o", d, d, bias))


def swiglu_hidden(f):
    """The page's F' = swiglu_hidden(F): int(2F/3) rounded up to a multiple of 8."""
    return (max(2 * f // 3, 1) + 7) // 8 * 8


def ffn(prefix, c):
    """A feed-forward block; with experts E, the router (E, D), no bias, then
    E blocks of the activation's kind under experts.0 ... experts.<E - 1>."""
    if "experts" in c:
        out = [(prefix + ".router.weight", [c["experts"], c["d_model"]])]
        for e in range(c["experts"]):
            out += dense_ffn(f"{prefix}.experts.{e}", c)
        return out
    return dense_ffn(prefix, c)


def dense_ffn(prefix, c):
    d, f = c["d_model"], c["d_ff"]
    if c["activation"] == "swiglu":  # gate, up, down; never biases
        h = swiglu_hidden(f)
        return (linear(prefix + ".gate", d, h, False) + linear(prefix + ".up", d, h, False) +
                linear(prefix + ".down", h, d, False))
    bias = c.get("bias", True)
    return linear(prefix + ".linear1", d, f, bias) + linear(prefix + ".linear2", f, d, bias)


def encoder_layer(prefix, c):
    return (attention(prefix + ".self_attn", c) + norm(prefix + ".norm1", c) +
            ffn(prefix + ".ffn", c) + norm(prefix + ".norm2", c))


def decoder_layer(prefix, c):
    return (attention(prefix + ".self_attn", c) + norm(prefix + ".norm1", c) +
            attention(prefix + ".cross_attn", c, False) + norm(prefix + ".norm2", c) +
            ffn(prefix + ".ffn", c) + norm(prefix + ".norm3", c))


def parameters(kind, c):
    """[(name, shape)] in the order the page lists for named_parameters()."""
    d = c["d_model"]
    p = []
    if kind == "seq2seq":
        p += [("src_embed.weight", [c["src_vocab"], d]), ("tgt_embed.weight", [c["tgt_vocab"], d])]
        rel = [c["heads"], c["rel_buckets"]] if "rel_buckets" in c else None
        if c["learned_positions"] and not rel:
            p += [("src_pos.weight", [c["max_positions"], d]),
                  ("tgt_pos.weight", [c["max_positions"], d])]
        if rel:  # a stack's table before its layers
            p.append(("encoder.rel_bias", rel))
        for i in range(c["encoder_layers"]):
            p += encoder_layer(f"encoder.layers.{i}", c)
        if c["pre_norm"]:
            p += norm("encoder.norm", c)
        if rel:
            p.append(("decoder.rel_bias", rel))
        for i in range(c["decoder_layers"]):
            p += decoder_layer(f"decoder.layers.{i}", c)
        if c["pre_norm"]:
            p += norm("decoder.norm", c)
        if not c["tie_weights"]:
            p.append(("lm_head.weight", [c["tgt_vocab"], d]))
        p.append(("lm_head.bias", [c["tgt_vocab"]]))
    elif kind == "gpt":
        p.append(("tok_embed.weight", [c["vocab"], d]))
        if "rope_base" not in c:  # rotary positions: no table
            p.append(("pos_embed.weight", [c["max_positions"], d]))
        for i in range(c["layers"]):
            p += encoder_layer(f"layers.{i}", c)
        if c["pre_norm"]:
            p += norm("norm", c)
        if not c["tie_weights"]:
            p.append(("lm_head.weight", [c["vocab"], d]))
    elif kind == "encoder":
        p.append(("embed.weight", [c["vocab"], d]))
        for i in range(c["layers"]):
            p += encoder_layer(f"encoder.layers.{i}", c)
        if c["pre_norm"]:
            p += norm("encoder.norm", c)
        p += linear("head", d, c["classes"])
    elif kind == "bert":
        p += [("embed.weight", [c["vocab"], d]), ("segment_embed.weight", [c["segments"], d]),
              ("pos_embed.weight", [c["max_positions"], d])]
        p += norm("embed_norm", c)
        for i in range(c["layers"]):
            p += encoder_layer(f"encoder.layers.{i}", c)
        if c["pre_norm"]:
            p += norm("encoder.norm", c)
        if c["head"] == "mlm":
            p.append(("mlm.bias", [c["vocab"]]))
            p += linear("mlm.dense", d, d) + norm("mlm.norm", c)
        elif c["head"] == "qa":
            p += linear("qa_outputs", d, 2)
        else:
            p += linear("pooler", d, d) + linear("classifier", d, c["classes"])
    elif kind == "vit":
        n = (c["image"] // c["patch"]) ** 2
        p += [("cls_token", [1, 1, d]), ("pos_embed", [n + 1, d])]
        p += linear("patch", c["channels"] * c["patch"] ** 2, d)  # kept with bias false
        for i in range(c["layers"]):
            p += encoder_layer(f"encoder.layers.{i}", c)
        if c["pre_norm"]:
            p += norm("encoder.norm", c)
        p += linear("head", d, c["classes"])
    else:
        raise ValueError(f"unknown model kind {kind!r}")
    return p


# ---------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------

def f32(x):
    """x rounded to the nearest float32 (as a Python float)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def draw_weights(params, rng):
    """{name: (shape, [float32 values])}: matrices uniform in +-sqrt(6/(rows+cols)),
    vectors in +-0.2, LayerNorm gains around 1."""
    out = {}
    for name, shape in params:
        if len(shape) == 2:
            a = math.sqrt(6.0 / (shape[0] + shape[1]))
            if name.endswith("embed.weight"):
                a = 0.5  # embeddings of unit order, so a wrong scale shows
        else:
            a = 0.2
        base = 1.0 if (".norm" in name or name.startswith(("norm.", "embed_norm."))) and \
            name.endswith(".weight") else 0.0
        out[name] = (shape, [f32(base + rng.uniform(-a, a)) for _ in range(numel(shape))])
    return out


# ---------------------------------------------------------------------------
# The bytes (the page's "The bytes")
# ---------------------------------------------------------------------------

def write_safetensors(path, tensors, metadata):
    """tensors {name: (shape, values)} as F32, sorted by name, back to back;
    metadata {str: str}; the header compact, ASCII, padded with spaces to 8."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors, key=lambda n: n.encode("utf-8")):
        shape, values = tensors[name]
        assert len(values) == numel(shape), name
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {k: metadata[k] for k in sorted(metadata)}
    text = json.dumps(header, separators=(",", ":")).encode("ascii")
    text += b" " * (-len(text) % 8)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(tmp, path)


def dumps(value):
    return json.dumps(value, separators=(",", ":"))


# ---------------------------------------------------------------------------
# The data a checkpoint of bert or vit names (the page's `data` key)
# ---------------------------------------------------------------------------

FNV_BASIS = 1469598103934665603  # the page's basis (not FNV's published 14695981039346656037)
FNV_PRIME = 1099511628211


def fnv1a64(data, h=FNV_BASIS):
    """The page's 64-bit FNV-1a hash of bytes, continued from h."""
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def write_file(path, raw):
    with open(path, "wb") as f:
        f.write(raw)


def file_entry(path, raw):
    """A data file's entry: the path as the run typed it, made absolute, its
    size and the FNV-1a hash of its bytes."""
    write_file(path, raw)
    return {"path": path, "abspath": os.path.abspath(path), "bytes": len(raw),
            "fnv1a64": "%016x" % fnv1a64(raw)}


def gzip_bytes(raw):
    """raw gzip-compressed, with no time stamp (the same bytes every time)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
        f.write(raw)
    return buf.getvalue()


def image_of(label, rng, side=6):
    """A gray side x side image: a bright left (0), right (1) or lower (2) half over noise."""
    px = []
    for y in range(side):
        for x in range(side):
            bright = (label == 0 and x < side // 2) or (label == 1 and x >= side // 2) or \
                (label == 2 and y >= side // 2)
            px.append(rng.randrange(150, 256) if bright else rng.randrange(0, 90))
    return px


def write_data(out_dir, name, case, run):
    """The data files a bert or vit checkpoint names, written beside it: the
    run's `data` (train_config) and the metadata `data` (None for a task run)."""
    rng = random.Random(case["seed"] + 100)
    fmt = run["format"]
    if fmt == "text":  # a corpus of words, one line a sequence; "a" is the mask token
        words = VOCAB[4:]
        lines = [" ".join(rng.choice(words) for _ in range(rng.randrange(3, 9))) for _ in range(30)]
        path = os.path.join(out_dir, f"format_{name}.txt")
        run["data"] = path
        return {"kind": "text", "data": file_entry(path, ("\n".join(lines) + "\n").encode()),
                "line_by_line": True}
    if fmt == "tsv" and run.get("objective") == "classify":  # text<TAB>label lines
        words, lines = VOCAB[3:], []
        for k in range(40):
            label = case["labels"][k % len(case["labels"])]
            texts = [" ".join(rng.choice(words) for _ in range(rng.randrange(1, 4)))
                     for _ in range(1 + k % 2)]  # every other line two texts (segments 0, 1)
            lines.append("\t".join(texts + [label]))
        path = os.path.join(out_dir, f"format_{name}.tsv")
        run["data"] = path
        return {"kind": "labels", "data": file_entry(path, ("\n".join(lines) + "\n").encode())}
    if fmt == "squad":  # SQuAD v1.1: each paragraph 6 to 9 words, two questions on it
        words, data = VOCAB[3:], []
        for k in range(12):
            ctx_words = [rng.choice(words) for _ in range(rng.randrange(6, 10))]
            context = " ".join(ctx_words)
            qas = []
            for j in range(2):
                at = rng.randrange(len(ctx_words))
                start = len(" ".join(ctx_words[:at])) + (1 if at else 0)  # characters
                qas.append({"id": f"q{k}.{j}", "question": " ".join(rng.sample(words, 2)),
                            "answers": [{"text": ctx_words[at], "answer_start": start}]})
            data.append({"title": str(k), "paragraphs": [{"context": context, "qas": qas}]})
        path = os.path.join(out_dir, f"format_{name}.json")
        run["data"] = path
        raw = json.dumps({"version": "1.1", "data": data}).encode()
        return {"kind": "squad", "data": file_entry(path, raw)}
    if fmt == "idx":  # MNIST's IDX files, gzipped: 30 gray 6 x 6 images of labels 0, 1, 2
        folder = os.path.join(out_dir, "format_images")
        os.makedirs(folder, exist_ok=True)
        img_rng = random.Random(5)  # the same folder for every vit case
        labels = [k % 3 for k in range(30)]
        pixels = [p for label in labels for p in image_of(label, img_rng)]
        write_file(os.path.join(folder, "train-images-idx3-ubyte.gz"),
                   gzip_bytes(struct.pack(">IIII", 0x803, len(labels), 6, 6) + bytes(pixels)))
        write_file(os.path.join(folder, "train-labels-idx1-ubyte.gz"),
                   gzip_bytes(struct.pack(">II", 0x801, len(labels)) + bytes(labels)))
        run["data"] = folder
        # The hash is of the images' pixels and labels (training, then the
        # test files' t10k-*, none here), not of the compressed files.
        h = fnv1a64(bytes(labels), fnv1a64(bytes(pixels)))
        return {"kind": "images",
                "data": {"path": folder, "abspath": os.path.abspath(folder),
                         "images": len(labels), "test_images": 0, "fnv1a64": "%016x" % h}}
    return None


# ---------------------------------------------------------------------------
# The two kinds of file
# ---------------------------------------------------------------------------

def model_metadata(case, prefix):
    md = {
        "model_kind": case["kind"],
        "model_config": dumps(case["config"]),
        "model_prefix": prefix,
        "special_tokens": dumps({"pad": 0, "bos": 1, "eos": 2}),  # a task's vocabulary: no <unk>
        "vocab": dumps(VOCAB),
        "tokenizer": "word",  # a task's symbols are typed as words
    }
    if case["kind"] == "vit":  # pixels in, classes out: no tokens
        del md["vocab"], md["tokenizer"]
    return md


def train_config(case):
    """Every train_config key of the page, for the built-in reverse task."""
    run = {"context": 0, "task": "reverse", "data": "", "valid": "", "format": "tsv",
           "tokens": "char", "valid_fraction": 0.1, "vocab": SYMBOLS, "min_len": 2,
           "max_len": 5, "heldout": 20, "max_vocab": 10000, "batch": 8, "steps": STEP,
           "schedule": "cosine", "lr": 0.003, "min_lr": 0.00015, "warmup": 1,
           "optimizer": "adam", "weight_decay": 0.0, "beta1": 0.9, "beta2": 0.98,
           "momentum": 0.9, "recompute": "none", "attention_budget": 0,
           "label_smoothing": 0.0, "clip": 1.0, "seed": 1}
    run.update(case["run"])
    return run


def generator_state(rng):
    """Four 64-bit words (not all zero), no cached normal draw."""
    words = [rng.getrandbits(64) | 1 for _ in range(4)]
    return " ".join(str(w) for w in words) + " 0x0p+0 0"


def optimizer_state(params, run, rng):
    """The optim.* tensors of the page's table: step, param_steps and each
    parameter's buffers, indexed in named_parameters() order."""
    state = {"optim.step": ([1], [float(STEP)]),
             "optim.param_steps": ([len(params)], [float(STEP)] * len(params))}
    kinds = ["momentum"] if run["optimizer"] == "sgd" else ["exp_avg", "exp_avg_sq"]
    for i, (_, shape) in enumerate(params):
        for kind in kinds:
            lo = 0.0 if kind == "exp_avg_sq" else -1e-2  # v is never negative
            hi = 1e-4 if kind == "exp_avg_sq" else 1e-2
            state[f"optim.{kind}.{i}"] = (shape, [f32(rng.uniform(lo, hi))
                                                  for _ in range(numel(shape))])
    return state


def write_case(out_dir, name, case):
    rng = random.Random(case["seed"])
    params = parameters(case["kind"], case["config"])
    weights = draw_weights(params, rng)
    # A key of our own (readers ignore keys they do not know): the order this
    # writer took from the page, which qkv's named_parameters() must match.
    md = model_metadata(case, "")
    md["writer_parameter_order"] = dumps([n for n, _ in params])
    write_safetensors(os.path.join(out_dir, f"format_{name}.safetensors"), weights, md)

    run = train_config(case)
    data = write_data(out_dir, name, case, run) or {"kind": "task", "task": run["task"]}
    tensors = {"model." + n: t for n, t in weights.items()}
    tensors.update(optimizer_state(params, run, rng))
    md = model_metadata(case, "model.")
    if "labels" in case:
        md["labels"] = dumps(case["labels"])
    md.update({
        "format": "qkv-train-v3",
        "train_config": dumps(run),
        "data": dumps(data),
        "step": str(STEP),
        "data_gen": generator_state(rng),
        "dropout_gen": generator_state(rng),
    })
    write_safetensors(os.path.join(out_dir, f"format_{name}.ckpt.safetensors"), tensors, md)


# A BPE tokenizer, from the page's `tokenizer`, `bpe` and `vocab` rows and its
# "BPE tokens in vocab": two merges, "a" + "b" -> token 256, 256 + "c" -> 257,
# after the 256 byte tokens; a gpt (the "gpt" case's settings) over the 3
# special tokens and those 258. Not a fixture: format_page.sh asks it.
BPE_MERGES = [[97, 98], [256, 99]]
BPE_PATTERN = "[a-z]+|[^a-z]+"


def bpe_entry(token_bytes):
    """A BPE token's vocab entry: each byte one character, as the page says."""
    def char(b):
        if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF:
            return chr(b)
        others = [x for x in range(256) if not (0x21 <= x <= 0x7E or 0xA1 <= x <= 0xAC or 0xAE <= x)]
        return chr(0x100 + others.index(b))  # the others in increasing order: U+0100, ...
    return "".join(char(b) for b in token_bytes)


def write_bpe_model(out_dir):
    tokens = [bytes([b]) for b in range(256)]
    for a, b in BPE_MERGES:
        tokens.append(tokens[a] + tokens[b])
    vocab = ["<pad>", "<s>", "</s>"] + [bpe_entry(t) for t in tokens]
    case = {"kind": "gpt", "config": dict(CASES["gpt"]["config"], vocab=len(vocab))}
    params = parameters("gpt", case["config"])
    weights = draw_weights(params, random.Random(17))
    md = model_metadata(case, "")
    md.update({"vocab": dumps(vocab), "tokenizer": "bpe",
               "bpe": dumps({"pattern": BPE_PATTERN, "merges": BPE_MERGES})})
    write_safetensors(os.path.join(out_dir, "format_gpt_bpe.safetensors"), weights, md)


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: format_writer.py DIR")
    os.makedirs(argv[1], exist_ok=True)
    for name, case in CASES.items():
        write_case(argv[1], name, case)
    write_bpe_model(argv[1])


if __name__ == "__main__":
    main(sys.argv)
