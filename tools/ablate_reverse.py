"""The ablation report's third base: positions on the reverse task's longer sequences.

tools/ablate.py imports this module. Issue 37 asks whether T5's relative
position bias extrapolates beyond the trained lengths better than sinusoids
and a learned table, on the translation set's long.tsv (group P of
tools/ablate.py) and on the built-in reverse task's longer set: this group.

The encoder-decoder trains on `--task reverse` (fresh random sequences of 3
to 10 symbols of 10 every batch, never one of the 1000 held-out ones) and is
then scored, length by length, on 200 sequences of each length 11 to 20
(`--long-lengths 11-20`, trainer/report.cpp): greedy exact-sequence and token
accuracy, and the teacher-forced per-token perplexity (exp of the mean
cross-entropy per target token including `</s>`).

A learned position table cannot represent a position it does not have: the
learned row's table is sized for the longest evaluated sequence (`--context
LEARNED_CONTEXT`: a source of 20 symbols, its answer and `</s>`), but training
only ever reads its first 11 rows (a source of at most 10, the decoder's
`<s>` and 10 symbols); rows 11 and beyond keep their random initialisation,
so on the longer set the model reads positions it never trained.

The relative rows use T5's 32 buckets up to distance 128: the 16 buckets of
each direction (8 in the causal decoder's) are exact below 8 and logarithmic
beyond, so distances 8 to 11 fall in the first logarithmic bucket, which
training reaches (rel up to 10), and 12 to 20 in buckets 9 and 10 of a
direction, which it does not.
"""
import math
import re
import statistics

STEPS = 1500                  # every reverse row's steps (its own, not --steps)
TRAIN_LENGTHS = (3, 10)       # --min-len, --max-len
LONG = (11, 20)               # --long-lengths
LEARNED_CONTEXT = 21          # the learned table's rows: a source of 20 and its answer

BASE = {
    "--model": "seq2seq", "--task": "reverse",
    "--min-len": str(TRAIN_LENGTHS[0]), "--max-len": str(TRAIN_LENGTHS[1]),
    "--d-model": "64", "--heads": "4", "--layers": "2", "--d-ff": "256", "--dropout": "0",
    "--positions": "sinusoidal", "--lr": "0.002", "--warmup": "steps/10",
    "--schedule": "cosine", "--batch": "64", "--long-lengths": f"{LONG[0]}-{LONG[1]}",
}

GROUPS = {"R": "positions on the reverse task's longer sequences"}
PLOT_WITH = {}

CLAIMS = [
    {"id": "R1", "kind": "better", "better": "R-sin-long", "worse": "R-learned-long",
     "metric": "long_ppl", "text": "Sinusoidal positions extrapolate to longer reversals than "
                                   "any trained on, learned ones less well"},
    {"id": "R2", "kind": "better", "better": "R-rel-long", "worse": "R-sin-long",
     "metric": "long_ppl", "text": "T5's relative position bias extrapolates to longer "
                                   "reversals better than sinusoids"},
    {"id": "R3", "kind": "better", "better": "R-rel-long", "worse": "R-sin-long",
     "metric": "long_exact", "text": "... and answers more of them exactly"},
]
METRICS = {"long_ppl": "perplexity on lengths {}-{}".format(*LONG),
           "long_exact": "exact match on lengths {}-{}".format(*LONG)}
LOWER_IS_BETTER = ("long_ppl",)


def rows(row):
    """The rows, made with tools/ablate.py's row()."""
    def rev(rid, label, set_=None, note=""):
        r = row(rid, "R", label, set_, note=note)
        r["base"] = "rev"
        return r
    return [
        rev("R-sin-long", "sinusoidal"),
        rev("R-learned-long", "learned", {"--positions": "learned",
                                          "--context": str(LEARNED_CONTEXT)},
            note=f"a table of {LEARNED_CONTEXT} rows, of which training reads "
                 f"{TRAIN_LENGTHS[1] + 1}"),
        rev("R-rel-long", "relative (T5)", {"--positions": "relative"},
            note="32 buckets up to distance 128, one table per stack"),
    ]


def row_flags(r):
    flags = dict(BASE)
    flags.update(r["set"])
    if flags.get("--warmup") == "steps/10":
        flags["--warmup"] = str(max(1, STEPS // 10))
    out = []
    for k, v in flags.items():
        out += [k] if v is None else [k, v]
    return out + ["--steps", str(STEPS), "--eval-every", str(max(1, STEPS // 6)),
                  "--no-early-stop", "--no-save", "--threads", "1",
                  "--log-every", str(max(STEPS, 1))]


LENGTH_LINE = re.compile(r"^  length (\d+): exact ([0-9.]+)%, token ([0-9.]+)%, BLEU ([0-9.]+), "
                         r"perplexity ([0-9.]+|inf|nan)$", re.M)


def parse_lengths(text):
    """The --long-lengths lines of the trainer's final report: {"by_length":
    {L: {"exact", "token", "bleu", "ppl"}}, "long_exact": the mean exact match
    over the lengths, "long_ppl": the perplexity over all their target tokens
    (each length's cross-entropy weighted by its L + 1 target tokens, </s>
    included; every length has the same number of sequences)}, or {}."""
    by = {}
    for m in LENGTH_LINE.finditer(text):
        by[int(m.group(1))] = {"exact": float(m.group(2)), "token": float(m.group(3)),
                               "bleu": float(m.group(4)), "ppl": float(m.group(5))}
    if not by:
        return {}
    tokens = sum(n + 1 for n in by)
    loss = sum((n + 1) * (math.log(v["ppl"]) if v["ppl"] > 0 else math.inf)
               for n, v in by.items()) / tokens
    return {"by_length": {str(n): v for n, v in sorted(by.items())},
            "long_exact": statistics.fmean(v["exact"] for v in by.values()),
            "long_ppl": math.exp(loss) if loss < 700 else math.inf}


def median_cell(values, fmt):
    """'97.5 (95.0-99.0)': the median of the seeds and their range."""
    if not values:
        return "—"
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})"


def report_lines(rows_, results_by_row, meta, fmt_stat, row_stats, complete, incomplete_why):
    """The report's section for the reverse rows, as a list of Markdown lines."""
    rev = [r for r in rows_ if r.get("base") == "rev"]
    if not rev:
        return []
    lengths = list(range(LONG[0], LONG[1] + 1))
    lines = [
        "## Positions on the reverse task's longer sequences", "",
        f"The encoder-decoder on the built-in reverse task (`--task reverse`: random sequences "
        f"of {TRAIN_LENGTHS[0]} to {TRAIN_LENGTHS[1]} of 10 symbols, fresh every batch, the "
        f"1000 held-out ones never trained on), {STEPS} steps of batch 64, 2+2 layers, d_model "
        f"64, 4 heads, d_ff 256, Post-LN, no dropout, Adam, lr 0.002 with warm-up and cosine "
        f"decay; then 200 sequences of each length {LONG[0]} to {LONG[1]}, longer than any "
        f"trained on (`--long-lengths {LONG[0]}-{LONG[1]}`), answered greedily. How the rows "
        "treat positions they never trained: [tools/ablate_reverse.py](tools/ablate_reverse.py) "
        f"(the learned table has {LEARNED_CONTEXT} rows, but training reads only the first "
        f"{TRAIN_LENGTHS[1] + 1}; the rest keep their random initialisation).", "",
        f"| row | positions | params | held-out exact % (lengths {TRAIN_LENGTHS[0]}-"
        f"{TRAIN_LENGTHS[1]}) | perplexity on {LONG[0]}-{LONG[1]} | exact on {LONG[0]}-"
        f"{LONG[1]} (%) | s/run |",
        "|---|---|---|---|---|---|---|"]
    shown = {}
    for r in rev:
        rs = results_by_row.get(r["id"], [])
        whole = complete(rs, meta["seeds"])
        ok = [x for x in rs if x.get("status") == "ok"] if whole else []
        shown[r["id"]] = ok
        st = row_stats(rs if whole else [], "long_ppl")
        if not rs:
            cell = "not run yet"
        elif whole:
            cell = fmt_stat(st, "long_ppl") + (f" ({st['n']})" if st else "")
        else:
            cell = "incomplete: " + incomplete_why(rs, meta["seeds"])
        ex = row_stats(rs if whole else [], "long_exact")
        params = str(ok[0]["params"]) if ok and ok[0].get("params") else ""
        held = median_cell([x["exact"] for x in ok if "exact" in x], lambda v: f"{v:.1f}")
        wall = f"{statistics.fmean(x['wall_s'] for x in ok):.0f}" if ok else ""
        label = r["label"] + (f": {r['note']}" if r.get("note") else "")
        lines.append(f"| {r['id']} | {label} | {params} | {held} | {cell} | "
                     f"{fmt_stat(ex, 'long_exact') if ex else '—'} | {wall} |")
    lines += ["", "Perplexity on the longer set: all its target tokens together, mean ± sd over "
              "seeds (n); exact: the mean over the lengths of each length's exact match, mean ± "
              "sd over seeds. By length, the median of the seeds and their range (min-max):", ""]
    for what, key, fmt in (("exact-sequence accuracy (%)", "exact", lambda v: f"{v:.1f}"),
                           ("token accuracy (%)", "token", lambda v: f"{v:.1f}"),
                           ("per-token perplexity", "ppl", lambda v: f"{v:.3g}")):
        lines += [f"{what}, by length:", "",
                  "| row | " + " | ".join(str(n) for n in lengths) + " |",
                  "|---|" + "---|" * len(lengths)]
        for r in rev:
            ok = [x for x in shown[r["id"]] if x.get("by_length")]
            cells = [median_cell([x["by_length"][str(n)][key] for x in ok
                                  if str(n) in x["by_length"]], fmt) for n in lengths]
            lines.append(f"| {r['id']} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines
