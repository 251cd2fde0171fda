"""The ablation report's second base: a GPT on English prose, scored in bits per byte.

tools/ablate.py imports this module. Its rows ask what each change between the
2017 GPT (GPT-1/GPT-2's block: learned positions, LayerNorm, GELU, every head
with its own keys and values, biases) and a llama-style block (Touvron et al.
2023: RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases) buys at a
laptop's scale, each change alone and all together, and what byte-level BPE
buys over characters.

The metric is held-out **bits per byte**: the held-out text's total
cross-entropy in bits over its length in bytes. Per-token perplexity depends
on what a token is; bits per byte does not, so a character model and a BPE
model compare on it (lower is better).

Equal parameters. Embeddings (the token table, the learned position table, a
tied output layer) are not counted, as in Kaplan et al. (2020): RoPE's
missing position table and BPE's larger token table then change nothing. The
rest is held equal, or the difference stated:
  - SwiGLU's hidden width is swiglu_hidden(d_ff) = 2 d_ff / 3 rounded up to
    a multiple of 8, so its three matrices hold what FFN's two held (+0.8% at
    d_ff 512: 3 * 128 * 344 against 2 * 128 * 512);
  - grouped-query attention with K = H/2 key/value heads saves D^2 / 2 per
    layer in W_K and W_V each (D^2 together); the row gives it back to the
    feed-forward: d_ff + D / 2 (2 D (d_ff + D/2) = 2 D d_ff + D^2);
  - no biases drops 4 D + d_ff + D per layer (the attention's and the FFN's;
    0.7% of a layer at D 128): not given back, and said in the table;
  - RMSNorm drops LayerNorm's bias vector (D per norm): not given back.
The trainer prints its parameter count; the table shows it without the
embeddings for each row, so the claim can be checked.

Equal work. Every row trains the same steps on the same bytes: a character
model reads CONTEXT bytes per sequence; the BPE rows read CONTEXT / (bytes per
token) tokens (BPE_CONTEXT, measured on the training text), so each step sees
about as many bytes of text.
"""
import os

CORPUS = "build/datasets/prose"  # `make prose` (datasets/make_prose.py)
HELD_OUT = "valid64k.txt"        # the first 64 KiB of valid.txt, cut at a line end
HELD_OUT_BYTES = 64 * 1024
STEPS = 600                      # every LM row's steps (its own, not --steps)
D, H, LAYERS, D_FF, CONTEXT, BATCH = 128, 4, 2, 512, 128, 8
KV_HEADS = H // 2
BPE_VOCAB = 512
BPE_CONTEXT = 61  # 128 bytes / 2.11 bytes per token (the trainer reports it) of the corpus at 512

BASE = {
    "--model": "gpt",
    "--d-model": str(D), "--heads": str(H), "--layers": str(LAYERS), "--d-ff": str(D_FF),
    "--context": str(CONTEXT), "--batch": str(BATCH),
    "--positions": "learned", "--norm": "layer", "--activation": "gelu",
    "--pre-ln": None, "--dropout": "0",
    "--lr": "0.002", "--warmup": "steps/10", "--schedule": "cosine",
    "--tokens": "char",
}
GQA = {"--kv-heads": str(KV_HEADS), "--d-ff": str(D_FF + D // 2)}


def moe(experts, k):
    """The flags of E experts, k a token, each d_ff / k wide (Switch's defaults otherwise)."""
    return {"--experts": str(experts), "--experts-per-token": str(k), "--d-ff": str(D_FF // k)}


LLAMA = {"--positions": "rope", "--norm": "rms", "--activation": "swiglu", "--no-bias": None,
         **GQA}


def rows(row):
    """The rows, made with tools/ablate.py's row()."""
    def lm(rid, group, label, set_=None, note=""):
        r = row(rid, group, label, set_, note=note)
        r["base"] = "lm"
        return r
    return [
        lm("L-2017", "L", "the 2017 GPT: learned positions, LayerNorm, GELU, full heads, biases"),
        lm("L-rope", "L", "RoPE instead of learned positions", {"--positions": "rope"}),
        lm("L-rms", "L", "RMSNorm instead of LayerNorm", {"--norm": "rms"}),
        lm("L-swiglu", "L", "SwiGLU instead of GELU", {"--activation": "swiglu"}),
        lm("L-gqa", "L", f"grouped-query attention, {KV_HEADS} of {H} key/value heads", GQA,
           note=f"d_ff {D_FF + D // 2} gives W_K and W_V's D^2 back"),
        lm("L-nobias", "L", "no biases", {"--no-bias": None}, note="biases not given back"),
        lm("L-llama", "L", "all five together (the llama-style block)", LLAMA),
        lm("T-bpe", "T", f"the llama-style block on BPE tokens ({BPE_VOCAB})",
           {**LLAMA, "--tokens": "bpe", "--bpe-vocab": str(BPE_VOCAB),
            "--context": str(BPE_CONTEXT)}),
    ] + [
        # A mixture of experts in place of the 2017 block's FFN at equal active
        # parameters a token: k experts of width d_ff / k (the router's D x E
        # on top, counted in the table).
        lm(f"M-e{e}k{k}", "M", f"{e} experts, {k} a token, each of width {D_FF // k}",
           {**moe(e, k)}, note=f"router +{D * e} a layer")
        for e, k in ((4, 1), (4, 2), (8, 1), (8, 2))
    ] + [
        lm("M-e4k1-noaux", "M", "4 experts, 1 a token, no load-balancing loss",
           {**moe(4, 1), "--aux-loss": "0"}, note=f"router +{D * 4} a layer"),
    ]


GROUPS = {"L": "after 2017: the GPT block's modern changes (bits per byte)",
          "M": "a mixture of experts against the dense FFN at equal active parameters",
          "T": "characters against byte-level BPE at equal bytes per step"}
PLOT_WITH = {"L": [], "T": ["L-llama"], "M": ["L-2017"]}

CLAIMS = [
    {"id": "L1", "kind": "better", "better": "L-rope", "worse": "L-2017", "metric": "bpb",
     "text": "Rotary positions beat a learned position table (Su et al.)"},
    {"id": "L2", "kind": "same", "better": "L-rms", "worse": "L-2017", "metric": "bpb",
     "text": "RMSNorm matches LayerNorm's quality (Zhang and Sennrich: its gain is speed)"},
    {"id": "L3", "kind": "better", "better": "L-swiglu", "worse": "L-2017", "metric": "bpb",
     "text": "SwiGLU beats GELU at equal parameters (Shazeer, GLU variants)"},
    {"id": "L4", "kind": "same", "better": "L-gqa", "worse": "L-2017", "metric": "bpb",
     "text": "Grouped-query attention costs little quality (Ainslie et al.)"},
    {"id": "L5", "kind": "same", "better": "L-nobias", "worse": "L-2017", "metric": "bpb",
     "text": "Biases can go without loss (the Llama and PaLM blocks)"},
    {"id": "L6", "kind": "better", "better": "L-llama", "worse": "L-2017", "metric": "bpb",
     "text": "The llama-style block together beats the 2017 GPT block"},
    {"id": "M1", "kind": "better", "better": "M-e8k1", "worse": "L-2017", "metric": "bpb",
     "text": "8 experts (1 a token) beat the dense FFN at equal active parameters (Switch)"},
    {"id": "M2", "kind": "better", "better": "M-e4k1", "worse": "M-e4k1-noaux", "metric": "bpb",
     "text": "The load-balancing loss helps a 4-expert mixture (Switch)"},
    {"id": "T1", "kind": "better", "better": "T-bpe", "worse": "L-llama", "metric": "bpb",
     "text": "Byte-level BPE beats characters at equal bytes per step"},
]


def prepare(root):
    """Writes the held-out file the LM rows score on from valid.txt, when it is
    missing or older: its first HELD_OUT_BYTES bytes, cut at the last line end
    before them (so no paragraph is cut). Every check of every run scores the
    same bytes."""
    src = os.path.join(root, CORPUS, "valid.txt")
    dst = os.path.join(root, CORPUS, HELD_OUT)
    if not os.path.isfile(dst) or os.path.getmtime(dst) < os.path.getmtime(src):
        with open(src, "rb") as f:
            data = f.read(HELD_OUT_BYTES)
        cut = data.rfind(b"\n")
        data = data[:cut + 1] if cut > 0 else data
        tmp = dst + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, dst)


def corpus_problem(root):
    """An error naming the missing corpus file and the command that makes it, or None."""
    for f in ("train.txt", "valid.txt"):
        if not os.path.isfile(os.path.join(root, CORPUS, f)):
            return f"ablate: the LM rows need {CORPUS}/{f} (make prose builds it)"
    return None


def row_flags(r, eval_every):
    flags = dict(BASE)
    flags.update(r["set"])
    if flags.get("--warmup") == "steps/10":
        flags["--warmup"] = str(max(1, STEPS // 10))
    out = ["--data", f"{CORPUS}/train.txt", "--valid", f"{CORPUS}/{HELD_OUT}", "--format", "text"]
    for k, v in flags.items():
        out += [k] if v is None else [k, v]
    return out + ["--steps", str(STEPS), "--eval-every", str(eval_every), "--no-early-stop",
                  "--no-save", "--threads", "1", "--log-every", str(STEPS)]


def eval_every():
    return max(1, STEPS // 6)


def non_embedding(res, r):
    """The run's parameters without the embeddings (token table, position table)."""
    p = res.get("params")
    if not p:
        return None
    v = res.get("vocab")
    if v is None:
        return None
    flags = dict(BASE)
    flags.update(r["set"])
    emb = int(v) * D * (1 if res.get("tied") else 2)  # the token table, and an untied output
    if flags.get("--positions") == "learned":
        emb += int(flags["--context"]) * D
    return p - emb


def report_lines(rows_, results_by_row, meta, fmt_stat, row_stats, complete, incomplete_why):
    """The report's section for the LM rows, as a list of Markdown lines."""
    lm = [r for r in rows_ if r.get("base") == "lm"]
    if not lm:
        return []
    lines = ["## After 2017: what each change to the GPT block buys", "",
             f"A decoder-only model on the English prose corpus (`make prose`: paragraphs of "
             f"the Python 3.11 documentation, python3.11-doc), {STEPS} steps of batch {BATCH}, "
             f"{LAYERS} layers, d_model {D}, {H} heads, d_ff {D_FF}, context {CONTEXT} "
             f"characters, Pre-LN, no dropout, Adam, lr 0.002 with warm-up and cosine decay; "
             f"scored on the first {HELD_OUT_BYTES // 1024} KiB of the held-out split "
             f"(`{CORPUS}/valid.txt`, cut from the training text in bytes before any tokenizer "
             "saw it), in **bits per byte** (lower is better), mean ± sd over seeds. Parameters "
             "are counted without the embeddings; how each row keeps them equal is in "
             "[tools/ablate_lm.py](tools/ablate_lm.py).", "",
             "| row | change | params (no embeddings) | bits per byte (dev) | ms/step | s/run |",
             "|---|---|---|---|---|---|"]
    for r in lm:
        rs = results_by_row.get(r["id"], [])
        whole = complete(rs, meta["seeds"])
        ok = [x for x in rs if x.get("status") == "ok"] if whole else []
        st = row_stats(rs if whole else [], "bpb")
        if not rs:
            cell = "not run yet"
        elif whole:
            cell = fmt_stat(st, "bpb") + (f" ({st['n']})" if st else "")
        else:
            cell = "incomplete: " + incomplete_why(rs, meta["seeds"])
        ne = non_embedding(ok[0], r) if ok else None
        ms = f"{sum(x['ms_per_step'] for x in ok) / len(ok):.0f}" if ok and all(
            "ms_per_step" in x for x in ok) else ""
        wall = f"{sum(x['wall_s'] for x in ok) / len(ok):.0f}" if ok else ""
        label = r["label"] + (f" ({r['note']})" if r.get("note") else "")
        lines.append(f"| {r['id']} | {label} | {ne if ne is not None else ''} | {cell} | {ms} "
                     f"| {wall} |")
    lines.append("")
    return lines
