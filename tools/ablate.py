#!/usr/bin/env python3
"""The paper's Table 3 and its design claims, tested on a laptop (issue 25).

`make ablate` runs this: every row below is one configuration of
`build/rel-f32/train`, trained for the same fixed number of steps with
several seeds, then compared on held-out per-token perplexity (the paper's
method: same steps, compare dev perplexity) and corpus BLEU. It writes
ABLATIONS.md (a Table-3-shaped table, one verdict per claim) and one SVG plot
per group of rows of held-out perplexity against steps.

    python3 tools/ablate.py [--rows A,D] [--seeds 3] [--steps 1000] [--jobs 2]

Every run's result is its own JSON file, runs/ablate/<row>/<seed>/result.json
(with the trainer's log.csv and output beside it); a harness that is stopped
and started again reuses the runs already written with the same command, so
it resumes where it was. A run that diverged is a result: it is shown in its
row, never dropped. A run that crashed makes its row incomplete (listed with
the crash, no figures, no verdict) and is tried again on the next start; so
is a row whose flag the trainer does not have yet, reported "not run: the
trainer has no flag X" (it runs once the flag lands). What it writes where,
and when it replaces the committed report: `--help`.

Standard library only. The verdict logic is tested on canned results in
tests/cli/ablate_test.py (run by tests/cli/ablate.sh in `make test`).
"""
import argparse
import concurrent.futures
import csv
import datetime
import hashlib
import json
import math
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time

import ablate_lm  # the second base: a GPT on English prose, in bits per byte
import ablate_reverse  # the third: the reverse task's longer sequences (group R)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK = "datasets/translation"  # tools/make_translation_task.py

# ---- the base configuration and the rows ------------------------------------------------------
# The paper's base model scaled to two CPU cores: the same shape of choices
# (encoder-decoder, Post-LN, sinusoidal positions, h = 8 heads with
# d_k = d_model / h, dropout 0.1, label smoothing 0.1, warm-up), 2+2 layers of
# width 64 instead of 6+6 of width 512.
BASE = {
    "--d-model": "64",
    "--heads": "8",
    "--layers": "2",
    "--d-ff": "256",
    "--dropout": "0.1",
    "--label-smoothing": "0.1",
    "--positions": "sinusoidal",
    "--post-ln": None,
    "--lr": "0.002",
    "--warmup": "steps/10",  # 100 at the default 1000 steps
    "--schedule": "cosine",
    "--batch": "64",
}
HIGH_LR = "0.01"  # group N: five times the base's peak learning rate

# Table 3 of Vaswani et al. (2017), newstest2013 dev set, EN-DE: (perplexity,
# BLEU) per row, typed by hand from memory of the paper (no copy of it was at
# hand to check against; not measured here). Our rows map to the paper's by
# direction: "halved"/"quartered" d_k to its d_k 32/16 of 64, N down/up to its
# N 2/8, d_model down/up to 256/1024, d_ff down/up to 1024/4096.
PAPER_BASE = (4.92, 25.8)


def row(rid, group, label, set_=None, drop=(), paper=None, valid="valid", note=""):
    """One configuration. Its base is the translation model ("mt") unless the
    row says otherwise (ablate_lm's rows: "lm")."""
    return {"id": rid, "group": group, "label": label, "set": dict(set_ or {}),
            "drop": list(drop), "paper": paper, "valid": valid, "note": note, "base": "mt"}


ROWS = [
    row("base", "base", "base", paper=PAPER_BASE),
    # (A) heads at fixed compute: d_k = d_model / h, so the parameters stay the same.
    row("A-h1", "A", "h 1 (d_k 64)", {"--heads": "1"}, paper=(5.29, 24.9)),
    row("A-h4", "A", "h 4 (d_k 16)", {"--heads": "4"}, paper=(5.00, 25.5)),
    row("A-h16", "A", "h 16 (d_k 4)", {"--heads": "16"}, paper=(4.91, 25.8)),
    # (B) a smaller attention key size d_k at fixed h (the paper's d_k 32 and 16 of 64).
    row("B-dk4", "B", "d_k 4 (halved)", {"--d-k": "4"}, paper=(5.01, 25.4)),
    row("B-dk2", "B", "d_k 2 (quartered)", {"--d-k": "2"}, paper=(5.16, 25.1)),
    # (C) depth, width and d_ff, down and up (the paper: N 2/4/8 around 6,
    # d_model 256/1024 around 512, d_ff 1024/4096 around 2048).
    row("C-N1", "C", "N 1", {"--layers": "1"}, paper=(6.11, 23.7)),
    row("C-N3", "C", "N 3", {"--layers": "3"}, paper=(4.88, 25.5)),
    row("C-d32", "C", "d_model 32 (d_k 4)", {"--d-model": "32"}, paper=(5.75, 24.5)),
    row("C-d128", "C", "d_model 128 (d_k 16)", {"--d-model": "128"}, paper=(4.66, 26.0)),
    row("C-ff128", "C", "d_ff 128", {"--d-ff": "128"}, paper=(5.12, 25.4)),
    row("C-ff512", "C", "d_ff 512", {"--d-ff": "512"}, paper=(4.75, 26.2)),
    # (D) regularisation.
    row("D-drop0", "D", "P_drop 0", {"--dropout": "0"}, paper=(5.77, 24.6)),
    row("D-drop0.2", "D", "P_drop 0.2", {"--dropout": "0.2"}, paper=(4.95, 25.5)),
    row("D-ls0", "D", "eps_ls 0", {"--label-smoothing": "0"}, paper=(4.67, 25.3)),
    row("D-ls0.2", "D", "eps_ls 0.2", {"--label-smoothing": "0.2"}, paper=(5.47, 25.7)),
    # (E) learned positions instead of sinusoids.
    row("E-learned", "E", "learned positions", {"--positions": "learned"}, paper=(4.92, 25.7)),
    # The 1/sqrt(d_k) scale, at the largest d_k of these rows (h 1, d_k 64; compare A-h1).
    row("S-h1-noscale", "S", "h 1 (d_k 64), no 1/sqrt(d_k)", {"--heads": "1", "--no-scale": None}),
    # Post-LN and Pre-LN, with and without warm-up, at a high learning rate.
    row("N-post-warm", "N", f"Post-LN, warm-up, lr {HIGH_LR}", {"--lr": HIGH_LR}),
    row("N-post-nowarm", "N", f"Post-LN, no warm-up, lr {HIGH_LR}",
        {"--lr": HIGH_LR, "--warmup": "0"}),
    row("N-pre-warm", "N", f"Pre-LN, warm-up, lr {HIGH_LR}", {"--lr": HIGH_LR, "--pre-ln": None},
        drop=["--post-ln"]),
    row("N-pre-nowarm", "N", f"Pre-LN, no warm-up, lr {HIGH_LR}",
        {"--lr": HIGH_LR, "--warmup": "0", "--pre-ln": None}, drop=["--post-ln"]),
    # Positions on sequences longer than any trained on: held out is long.tsv
    # (sources of 16-33 words; training has at most 14).
    row("P-sin-long", "P", "sinusoidal, held-out longer", valid="long"),
    row("P-learned-long", "P", "learned, held-out longer", {"--positions": "learned"}, valid="long"),
    # T5's relative position bias (a learned scalar per head per distance
    # bucket, no absolute positions): the next answer to extrapolation.
    row("P-rel-long", "P", "relative (T5), held-out longer", {"--positions": "relative"},
        valid="long"),
] + ablate_lm.rows(row) + ablate_reverse.rows(row)
ROW_BY_ID = {r["id"]: r for r in ROWS}

GROUPS = {
    "base": "the base configuration",
    "A": "(A) number of heads at fixed compute",
    "B": "(B) attention key size d_k",
    "C": "(C) depth, width and d_ff",
    "D": "(D) dropout and label smoothing",
    "E": "(E) positional encoding",
    "S": "the 1/sqrt(d_k) scale",
    "N": "Post-LN / Pre-LN and warm-up at a high learning rate",
    "P": "positions on longer sequences than trained on",
    **ablate_lm.GROUPS,
    **ablate_reverse.GROUPS,
}
# Rows drawn beside a group's own in its plot (the row it is compared with).
PLOT_WITH = {"A": ["base"], "B": ["base"], "C": ["base"], "D": ["base"], "E": ["base"],
             "S": ["A-h1"], **ablate_lm.PLOT_WITH}

# ---- the claims ------------------------------------------------------------------------------
# kind "better": row `better` beats row `worse` on `metric`; kind "same": the
# two rows give the same result (the paper's "nearly identical").
CLAIMS = [
    {"id": "A1", "kind": "better", "better": "base", "worse": "A-h1", "metric": "ppl",
     "text": "Single-head attention is worse than the base's multi-head attention "
             "(paper: 0.9 BLEU worse than the best setting)"},
    {"id": "A2", "kind": "better", "better": "base", "worse": "A-h16", "metric": "ppl",
     "text": "Quality also drops off with too many heads (paper: h 32, d_k 16)"},
    {"id": "B1", "kind": "better", "better": "base", "worse": "B-dk2", "metric": "ppl",
     "text": "Reducing the attention key size d_k hurts model quality"},
    {"id": "C1", "kind": "better", "better": "C-N3", "worse": "C-N1", "metric": "ppl",
     "text": "Bigger models are better: more layers"},
    {"id": "C2", "kind": "better", "better": "C-d128", "worse": "C-d32", "metric": "ppl",
     "text": "Bigger models are better: a wider d_model"},
    {"id": "C3", "kind": "better", "better": "C-ff512", "worse": "C-ff128", "metric": "ppl",
     "text": "Bigger models are better: a wider d_ff"},
    {"id": "D1", "kind": "better", "better": "base", "worse": "D-drop0", "metric": "ppl",
     "text": "Dropout is very helpful in avoiding over-fitting (P_drop 0.1 beats 0)"},
    {"id": "D2", "kind": "better", "better": "D-ls0", "worse": "base", "metric": "ppl",
     "text": "Label smoothing hurts perplexity, as the model learns to be more unsure "
             "(eps_ls 0 has the lower perplexity)"},
    {"id": "D3", "kind": "better", "better": "base", "worse": "D-ls0", "metric": "bleu",
     "text": "... but label smoothing improves BLEU (eps_ls 0.1 beats 0)"},
    {"id": "E1", "kind": "same", "better": "base", "worse": "E-learned", "metric": "ppl",
     "text": "Learned positional embeddings give nearly identical results to sinusoids"},
    {"id": "S1", "kind": "better", "better": "A-h1", "worse": "S-h1-noscale", "metric": "ppl",
     "text": "Without the 1/sqrt(d_k) scale, large dot products push the softmax into "
             "saturation and training suffers (d_k 64)"},
    {"id": "N1", "kind": "better", "better": "N-post-warm", "worse": "N-post-nowarm",
     "metric": "ppl", "text": f"Post-LN needs warm-up at a high learning rate (lr {HIGH_LR})"},
    {"id": "N2", "kind": "better", "better": "N-pre-nowarm", "worse": "N-post-nowarm",
     "metric": "ppl", "text": "Pre-LN trains more stably than Post-LN without warm-up"},
    {"id": "N3", "kind": "same", "better": "N-pre-warm", "worse": "N-pre-nowarm", "metric": "ppl",
     "text": "Pre-LN does not need the warm-up"},
    {"id": "P1", "kind": "better", "better": "P-sin-long", "worse": "P-learned-long",
     "metric": "ppl", "text": "Sinusoidal positions extrapolate to sequences longer than any "
                              "trained on, learned ones less well"},
    {"id": "P2", "kind": "better", "better": "P-rel-long", "worse": "P-sin-long",
     "metric": "ppl", "text": "T5's relative position bias extrapolates to longer sequences "
                              "better than sinusoids"},
] + ablate_lm.CLAIMS + ablate_reverse.CLAIMS
STOP = threading.Event()  # set on Ctrl-C: no new run starts
MIN_SEEDS = 3  # a claim is judged from at least this many seeds per row, never one run
METRIC_NAME = {"ppl": "perplexity", "bleu": "BLEU", "bpb": "bits per byte",
               **ablate_reverse.METRICS}
LOWER_IS_BETTER = ("ppl", "bpb") + ablate_reverse.LOWER_IS_BETTER


# ---- statistics and verdicts (pure functions: tested on canned results) ------------------------
def row_stats(results, metric):
    """Mean, spread and interval of `metric` over a row's seed results.

    results: the JSON dicts of one row's runs. Runs that did not train (not
    run, crashed) carry no value. A diverged run has no final figures; it
    counts as the worst value (perplexity inf, BLEU and accuracy 0), so a row
    that diverges can never look better than it is. Returns None when no run
    has a value, else a dict: n (seeds with a value), diverged, finite (the
    values of the runs that finished), their mean and sd (sample standard
    deviation, 0 for one run), and the interval (lo, hi) = mean -/+ sd,
    stretched to the worst value when any seed diverged.
    """
    worst = math.inf if metric in LOWER_IS_BETTER else 0.0
    finite, diverged = [], 0
    for r in results:
        if r.get("status") == "diverged":
            diverged += 1
        elif r.get("status") == "ok" and r.get(metric) is not None and \
                math.isfinite(float(r[metric])):
            finite.append(float(r[metric]))
    n = len(finite) + diverged
    if n == 0:
        return None
    if finite:
        mean = statistics.fmean(finite)
        sd = statistics.stdev(finite) if len(finite) > 1 else 0.0
        lo, hi = mean - sd, mean + sd
        if diverged:
            lo, hi = (lo, worst) if metric in LOWER_IS_BETTER else (worst, hi)
    else:
        mean, sd, lo, hi = worst, 0.0, worst, worst
    return {"n": n, "diverged": diverged, "finite": finite, "mean": mean, "sd": sd,
            "lo": lo, "hi": hi}


def complete(rs, seeds):
    """Whether a row's results hold, for every seed 1..seeds, a training that
    ran to its end (finished or diverged). Only complete rows give figures and
    verdicts: a row missing a crashed, refused or unrun seed would otherwise
    look as if it had been measured."""
    ended = {x.get("seed") for x in rs if x.get("status") in ("ok", "diverged")}
    return all(s in ended for s in range(1, seeds + 1))


def incomplete_why(rs, seeds):
    """'crashed (exit 1): ... (seed 2); seed 3 not run yet': why a row is not complete."""
    why = status_cell(rs)
    have = {x.get("seed") for x in rs}
    missing = [str(s) for s in range(1, seeds + 1) if s not in have]
    if missing:
        why += ("; " if why else "") + f"seed {', '.join(missing)} not run yet"
    return why


def overlap(a, b):
    return a["lo"] <= b["hi"] and b["lo"] <= a["hi"]


def judge(claim, results_by_row, min_seeds=MIN_SEEDS, seeds=None):
    """(verdict, detail) for one claim. verdict is one of "reproduced",
    "not reproduced", "not separable at this scale" or "not judged". With
    `seeds`, a row that is not complete for seeds 1..seeds is not judged."""
    m = claim["metric"]
    stats = {}
    for rid in (claim["better"], claim["worse"]):
        rs = results_by_row.get(rid, [])
        if seeds is not None and rs and not complete(rs, seeds):
            return "not judged", f"row {rid} is incomplete ({incomplete_why(rs, seeds)})"
        st = row_stats(rs, m)
        if st is None:
            why = "; ".join(sorted({r.get("reason") or r.get("status", "?") for r in rs})) or \
                "no run yet"
            return "not judged", f"row {rid} has no result ({why})"
        if st["n"] < min_seeds:
            return "not judged", f"row {rid} has {st['n']} seed(s), fewer than {min_seeds}"
        stats[rid] = st
    a, b = stats[claim["better"]], stats[claim["worse"]]
    detail = f"{claim['better']} {fmt_stat(a, m)} vs {claim['worse']} {fmt_stat(b, m)}"
    if claim["kind"] == "same":
        if overlap(a, b):
            return "reproduced", detail + ": the spreads overlap, as the paper found no difference"
        return "not reproduced", detail + ": the spreads do not overlap"
    if overlap(a, b):
        return "not separable at this scale", detail + ": the spreads overlap"
    lower_is_better = m in LOWER_IS_BETTER
    a_wins = a["hi"] < b["lo"] if lower_is_better else a["lo"] > b["hi"]
    if a_wins:
        return "reproduced", detail
    return "not reproduced", detail + ": the other way round"


def fmt_num(v, m):
    if math.isinf(v):
        return "inf"
    return f"{v:.3f}" if m in LOWER_IS_BETTER else f"{v:.2f}"


def fmt_stat(st, m):
    """'5.123 ± 0.040' (mean ± sd over seeds), with the diverged seeds named."""
    if st is None:
        return "—"
    if not st["finite"]:
        return f"diverged {st['diverged']}/{st['n']}"
    s = f"{fmt_num(st['mean'], m)} ± {fmt_num(st['sd'], m)}"
    if st["diverged"]:
        s = f"diverged {st['diverged']}/{st['n']}, the others {s}"
    return s


# ---- running the trainer ----------------------------------------------------------------------
def row_flags(r, steps, eval_every, task):
    if r["base"] == "lm":  # its own steps, checks and data (tools/ablate_lm.py)
        return ablate_lm.row_flags(r, ablate_lm.eval_every())
    if r["base"] == "rev":  # its own steps and task (tools/ablate_reverse.py)
        return ablate_reverse.row_flags(r)
    flags = dict(BASE)
    for k in r["drop"]:
        flags.pop(k, None)
    flags.update(r["set"])
    if flags.get("--warmup") == "steps/10":
        flags["--warmup"] = str(max(1, steps // 10))
    data = ["--data", f"{task}/train.tsv", "--valid", f"{task}/{r['valid']}.tsv", "--tokens", "word"]
    out = []
    for k, v in flags.items():
        out += [k] if v is None else [k, v]
    return data + out + ["--steps", str(steps), "--eval-every", str(eval_every), "--no-early-stop",
                         "--no-save", "--threads", "1", "--log-every", str(max(steps, 1))]


_file_hashes = {}


def file_hash(path):
    if path not in _file_hashes:
        try:
            with open(os.path.join(ROOT, path), "rb") as f:
                _file_hashes[path] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            _file_hashes[path] = "missing"
    return _file_hashes[path]


def run_key(cmd):
    """What makes two runs the same: the command and the contents of its data
    files (a regenerated data set is never mixed with runs of the old one)."""
    data = [cmd[i + 1] for i, w in enumerate(cmd[:-1]) if w in ("--data", "--valid")]
    return hashlib.sha256("\0".join(cmd + [file_hash(p) for p in data]).encode()).hexdigest()[:16]


def parse_output(text):
    """The figures of the trainer's final report (trainer/report.cpp)."""
    res = {}
    m = re.search(r"per-token perplexity ([0-9.]+|inf|nan) \(cross-entropy ([0-9.]+|inf|nan)", text)
    if m:
        res["ppl"], res["loss"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"greedy: +exact-sequence accuracy +([0-9.]+)%, token accuracy +([0-9.]+)%"
                  r"(?:, BLEU +([0-9.]+))?", text)
    if m:
        res["exact"], res["token"] = float(m.group(1)), float(m.group(2))
        if m.group(3) is not None:
            res["bleu"] = float(m.group(3))
    m = re.search(r"trained (\d+) steps in ([0-9.]+) s \(([0-9.]+) ms/step", text)
    if m:
        res["steps_done"], res["train_s"], res["ms_per_step"] = (int(m.group(1)),
                                                                 float(m.group(2)),
                                                                 float(m.group(3)))
    m = re.search(r"(\d+) parameters", text)
    if m:
        res["params"] = int(m.group(1))
    # A language model's held-out report (trainer/report.cpp).
    m = re.search(r"^held-out \((\d+) tokens\): loss ([0-9.]+|inf|nan), perplexity "
                  r"([0-9.]+|inf|nan)(?:, ([0-9.]+|inf|nan) bits per byte)?", text, re.M)
    if m:
        res["loss"], res["ppl"] = float(m.group(2)), float(m.group(3))
        if m.group(4) is not None:
            res["bpb"] = float(m.group(4))
    m = re.search(r"vocabulary (\d+)", text)
    if m:
        res["vocab"] = int(m.group(1))
    res["tied"] = bool(re.search(r"^model: .*, tied, \d+ parameters$", text, re.M))
    res.update(ablate_reverse.parse_lengths(text))  # --long-lengths: each length's line
    return res


def refused_flag(stderr, cmd):
    """The flag the trainer does not know (CLI11: 'The following argument(s)
    was/were not expected: ...'), or None."""
    m = re.search(r"not expected: (.*)", stderr)
    if not m:
        return None
    words = m.group(1).split()
    flags = [w for w in words if w.startswith("--")]
    return flags[0] if flags else words[0] if words else "?"


def command(binary, r, seed, steps, eval_every, task):
    return [binary] + row_flags(r, steps, eval_every, task) + ["--seed", str(seed)]


def stored_result(results_dir, r, seed, cmd):
    """The result.json of this row and seed when it was written by the same
    command (same flags, steps, binary path), else None."""
    path = os.path.join(results_dir, r["id"], str(seed), "result.json")
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return None
    return old if old.get("key") == run_key(cmd) else None


# Exit codes of a trainer that was stopped rather than failed: killed by SIGINT,
# SIGHUP or SIGTERM, or exiting 128 + that signal after catching it.
STOPPED = {-signal.SIGINT, -signal.SIGHUP, -signal.SIGTERM, 129, 130, 143}


def signal_name(n):
    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)


def run_one(binary, r, seed, steps, eval_every, task, results_dir, commit):
    """Runs (or reuses) one training; returns its result dict."""
    out_dir = os.path.join(results_dir, r["id"], str(seed))
    cmd = command(binary, r, seed, steps, eval_every, task)
    key = run_key(cmd)
    path = os.path.join(out_dir, "result.json")
    old = stored_result(results_dir, r, seed, cmd)
    # A refused or crashed run is tried again: its flag may have landed, or its
    # cause (memory, a bug) gone, since; a row counts only once it is complete.
    if old is not None and old.get("status") not in ("not run", "crashed"):
        old["reused"] = True
        return old
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.time()
    try:
        p = subprocess.run(cmd + ["--out", out_dir], capture_output=True, text=True, cwd=ROOT,
                           timeout=3600)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        rc, stdout, stderr = None, text(e.stdout), text(e.stderr) + "\ntimed out after 3600 s"
    wall = time.time() - t0
    if STOP.is_set() or rc in STOPPED:
        # Stopped by Ctrl-C (which reaches the trainer too), a hang-up or a
        # kill: not a result. Nothing is written, so the next start runs it
        # again. Any other signal (SIGSEGV, SIGABRT, ...) is a crash.
        return {"row": r["id"], "seed": seed, "status": "interrupted",
                "reason": f"interrupted (exit {rc})", "wall_s": round(wall, 2)}
    with open(os.path.join(out_dir, "output.txt"), "w") as f:
        f.write(stdout + ("\n--- stderr ---\n" + stderr if stderr else ""))
    res = {"row": r["id"], "seed": seed, "key": key, "command": shlex.join(cmd),
           "exit_code": rc, "wall_s": round(wall, 2), "commit": commit,
           "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    res.update(parse_output(stdout))
    res["steps_to_target"] = steps_to_target(os.path.join(out_dir, "log.csv"))
    last_err = next((ln for ln in reversed(stderr.strip().splitlines()) if ln.strip()), "")
    flag = refused_flag(stderr, cmd) if rc not in (0, 3) else None
    if rc == 0 and "ppl" in res:
        res["status"] = "ok"
    elif rc == 3:
        res["status"] = "diverged"
        err = next((ln for ln in stderr.splitlines() if ln.startswith("error:")), last_err)
        res["reason"] = "diverged: " + err.removeprefix("error: ").strip()
    elif flag:
        res["status"] = "not run"
        res["reason"] = f"not run: the trainer has no flag {flag}"
    elif rc is not None and wall < 10 and "error" in stderr and "step" not in stdout:
        res["status"] = "not run"
        res["reason"] = "not run: the trainer refused it: " + last_err.removeprefix("error: ")
    else:
        res["status"] = "crashed"
        how = f"signal {signal_name(-rc)}" if rc is not None and rc < 0 else f"exit {rc}"
        res["reason"] = f"crashed ({how})" + (f": {last_err}" if last_err else "")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
    os.replace(tmp, path)  # a result is either whole or absent
    return res


def read_eval_curve(log_csv):
    """[(step, held-out perplexity)] from a run's log.csv (its eval rows)."""
    pts = []
    try:
        with open(log_csv, newline="") as f:
            for rec in csv.DictReader(f):
                v = rec.get("heldout_loss") or ""
                if v and not rec.get("loss"):
                    loss = float(v)
                    pts.append((int(rec["step"]), math.exp(loss) if loss < 700 else math.inf))
    except (OSError, ValueError, KeyError):
        pass
    return pts


TARGET_EXACT = 0.9  # "steps to target": the first held-out check at 90% exact match


def steps_to_target(log_csv, target=TARGET_EXACT):
    """The step of the first held-out check with exact match >= target in a
    run's log.csv, or None when no check reached it."""
    try:
        with open(log_csv, newline="") as f:
            for rec in csv.DictReader(f):
                v = rec.get("heldout_exact") or ""
                if v and float(v) >= target:
                    return int(rec["step"])
    except (OSError, ValueError, KeyError):
        pass
    return None


# ---- SVG plots --------------------------------------------------------------------------------
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#39;")


def write_plot_svg(path, title, series):
    """series: [(label, [[(step, ppl)] per seed])]: one colour per row, a thin
    line per seed and a thick one for the mean over seeds; log-scale y."""
    W, H, L, R, T, B = 940, 440, 70, 410, 40, 50
    pts = [p for _, seeds in series for curve in seeds for p in curve if math.isfinite(p[1])]
    with open(path, "w") as f:
        f.write(f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}' "
                "font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
                "fill='white'/>\n")
        f.write(f"<text x='{(W - R + L) / 2}' y='22' text-anchor='middle' font-size='15'>"
                f"{esc(title)}</text>\n")
        if not pts:
            f.write(f"<text x='{L}' y='{H / 2}'>no evaluation points yet</text>\n</svg>\n")
            return
        x0, x1 = 0, max(p[0] for p in pts)
        y0 = max(1.0, min(p[1] for p in pts))
        y1 = max(max(p[1] for p in pts), y0 * 1.5)
        ly0, ly1 = math.log10(y0), math.log10(y1)

        def X(s):
            return L + (W - L - R) * (s - x0) / max(x1 - x0, 1)

        def Y(v):
            v = min(max(v, y0), y1)
            return H - B - (H - T - B) * (math.log10(v) - ly0) / max(ly1 - ly0, 1e-9)

        f.write(f"<rect x='{L}' y='{T}' width='{W - L - R}' height='{H - T - B}' fill='none' "
                "stroke='black'/>\n")
        # y ticks: six, evenly spaced on the log scale
        for i in range(6):
            v = 10 ** (ly0 + (ly1 - ly0) * i / 5)
            f.write(f"<line x1='{L}' y1='{Y(v):.1f}' x2='{W - R}' y2='{Y(v):.1f}' "
                    f"stroke='#ddd'/><text x='{L - 6}' y='{Y(v) + 4:.1f}' "
                    f"text-anchor='end'>{v:.3g}</text>\n")
        for i in range(6):
            s = x0 + (x1 - x0) * i / 5
            f.write(f"<text x='{X(s):.1f}' y='{H - B + 18}' text-anchor='middle'>{s:g}</text>\n")
        f.write(f"<text x='{(W - R + L) / 2}' y='{H - 12}' text-anchor='middle'>step</text>\n")
        f.write(f"<text transform='translate(18,{(H - B + T) / 2}) rotate(-90)' "
                "text-anchor='middle'>held-out per-token perplexity (log)</text>\n")
        for i, (label, seeds) in enumerate(series):
            c = COLORS[i % len(COLORS)]
            for curve in seeds:
                if curve:
                    p = " ".join(f"{X(s):.1f},{Y(v):.1f}" for s, v in curve)
                    f.write(f"<polyline fill='none' stroke='{c}' stroke-opacity='0.35' "
                            f"stroke-width='1' points='{p}'/>\n")
            steps = sorted({s for curve in seeds for s, _ in curve})
            mean = []
            for s in steps:
                vs = [v for curve in seeds for t, v in curve if t == s]
                mean.append((s, math.inf if any(math.isinf(v) for v in vs)
                             else statistics.fmean(vs)))
            if mean:
                p = " ".join(f"{X(s):.1f},{Y(v):.1f}" for s, v in mean)
                f.write(f"<polyline fill='none' stroke='{c}' stroke-width='2.2' points='{p}'/>\n")
            ly = T + 16 + 18 * i
            f.write(f"<line x1='{W - R + 12}' y1='{ly - 4}' x2='{W - R + 32}' y2='{ly - 4}' "
                    f"stroke='{c}' stroke-width='2.2'/><text x='{W - R + 38}' y='{ly}'>"
                    f"{esc(label)}</text>\n")
        f.write(f"<text x='{W - R + 12}' y='{T + 16 + 18 * len(series) + 10}' font-size='10' "
                "fill='#555'>thick: mean over seeds; thin: each seed</text>\n</svg>\n")


# ---- ABLATIONS.md -----------------------------------------------------------------------------
def machine():
    cores = os.cpu_count() or 0
    model, avx512 = "?", 0
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        m = re.search(r"model name\s*:\s*(.*)", info)
        model = m.group(1).strip() if m else "?"
        avx512 = sum(1 for ln in info.splitlines() if ln.startswith("flags") and "avx512f" in ln)
    except OSError:
        pass
    return f"{model}, {cores} cores, `grep -c avx512f /proc/cpuinfo` = {avx512}, " \
           f"{platform.system()} {platform.release()}"


def cell(r, key):
    """The row's value in a Table-3 column, blank when it is the base's (as in the paper)."""
    flags = dict(BASE)
    for k in r["drop"]:
        flags.pop(k, None)
    flags.update(r["set"])
    d, h = int(flags["--d-model"]), int(flags["--heads"])
    vals = {"N": flags["--layers"], "d_model": flags["--d-model"], "d_ff": flags["--d-ff"],
            "h": flags["--heads"], "d_k": flags.get("--d-k", str(d // h)),
            "P_drop": flags["--dropout"], "eps_ls": flags["--label-smoothing"]}
    base = cell_base()
    return "" if r["id"] != "base" and vals[key] == base[key] else vals[key]


def cell_base():
    d, h = int(BASE["--d-model"]), int(BASE["--heads"])
    return {"N": BASE["--layers"], "d_model": BASE["--d-model"], "d_ff": BASE["--d-ff"],
            "h": BASE["--heads"], "d_k": str(d // h), "P_drop": BASE["--dropout"],
            "eps_ls": BASE["--label-smoothing"]}


def other_cell(r):
    bits = []
    s = r["set"]
    if s.get("--positions") == "learned":
        bits.append("learned positions")
    if "--pre-ln" in s:
        bits.append("Pre-LN")
    if "--no-scale" in s:
        bits.append("no 1/sqrt(d_k)")
    if "--lr" in s:
        bits.append(f"lr {s['--lr']}")
    if s.get("--warmup") == "0":
        bits.append("no warm-up")
    if r["valid"] == "long":
        bits.append("held out: longer")
    return ", ".join(bits)


def status_cell(rs):
    """What happened to a row's runs that gave no numbers (never silently dropped)."""
    bad = [r for r in rs if r.get("status") not in ("ok",)]
    if not bad:
        return ""
    reasons = {}
    for r in bad:
        reasons.setdefault(r.get("reason") or r.get("status"), []).append(str(r["seed"]))
    return "; ".join(f"{why} (seed {', '.join(s)})" for why, s in reasons.items())


def steps_cell(ok):
    """Mean steps to the exact-match target over the seeds that reached it, and how many did."""
    ok = [x for x in ok if "steps_to_target" in x]  # results written before it was recorded
    if not ok:
        return "—"
    hit = [x["steps_to_target"] for x in ok if x["steps_to_target"] is not None]
    if not hit:
        return f"not reached (0/{len(ok)})"
    return f"{statistics.fmean(hit):.0f} ({len(hit)}/{len(ok)})"


def write_report(path, plots_dir, results_by_row, rows, meta):
    rdir = os.path.dirname(os.path.abspath(path))
    lines = ["# Ablations: the paper's claims, tested on a laptop", ""]
    lines += [f"Written by `{meta['command']}` ([tools/ablate.py](tools/ablate.py)) on "
              f"{meta['date']}.", "",
              f"- commit measured: {meta['commit']}",
              f"- machine: {meta['machine']}",
              f"- runs: {meta['seeds']} seed(s) per row, {meta['steps']} steps each, held-out "
              f"checks every {meta['eval_every']} steps, {meta['jobs']} single-thread trainings "
              f"at once (`--threads 1`); {meta['summary']}",
              "- why two at once: two single-thread trainings side by side beat one data-parallel "
              "training on both cores. Two base runs of 300 steps took 19.1 s side by side and "
              "23.4 s as two `mpirun -np 2` runs of the MPI build one after the other (2026-11-25, "
              "AVX2 EPYC, 2 cores; the allreduce was 7-9% of an MPI step)", ""]
    lines += [
        "Task: the synthetic translation set `datasets/translation/` "
        "(`tools/make_translation_task.py`, seed 25, word tokens): an SVO English-like source "
        "into an SOV target with its adjectives after the noun, gender and number agreement the "
        "source does not show, and a verb that agrees with a subject far before it. "
        "A lexicon of 48 nouns, 20 adjectives and 20 verbs with invented target words; "
        "4000 training pairs (small enough to over-fit, which the dropout and label-smoothing "
        "rows need), 500 held-out pairs of the same lengths, and 500 longer ones (`long.tsv`, "
        "sources of 16-33 words where training has at most 14) for the positions claim. "
        "Why this task: the reverse task saturates at 100% in a few hundred steps, and the "
        "date set (`datasets/dates`) reaches 99.9% held-out exact match in 1000 steps "
        "([docs/training.md](docs/training.md#your-own-data)), so neither separates rows; a "
        "first version of this task with 12 nouns saturated too (100% exact by step 800 of "
        "1000). Here the base model is still learning at the fixed budget, as the paper's "
        "models are at 100K steps, and word tokens keep the runs short.", "",
        "Base: encoder-decoder, " + " ".join(
            k if v is None else f"{k} {v}" for k, v in BASE.items()) + " (the paper's base: "
        "N 6, d_model 512, d_ff 2048, h 8, d_k 64, P_drop 0.1, eps_ls 0.1, Post-LN, "
        "sinusoidal, warm-up). Every row changes only what its line says, trains the same "
        "number of steps, and is compared on held-out per-token perplexity (teacher-forced, "
        "exp of the mean cross-entropy per target token including `</s>`, no label smoothing) "
        "and corpus BLEU of the greedy answers (4-gram, brevity penalty, no smoothing, on the "
        "model's word tokens; `trainer/bleu.h`).", "",
        "Mean ± sd over seeds (sample standard deviation). A diverged seed counts as perplexity "
        "inf and BLEU 0. A claim is judged only from rows with at least "
        f"{MIN_SEEDS} seeds: **reproduced** when the intervals mean ± sd do not overlap and lie "
        "the paper's way, **not reproduced** when they do not overlap the other way, "
        "**not separable at this scale** when they overlap (for a claim of *no* difference, "
        "overlap is what reproduces it).", "",
        "The paper's columns are Table 3 of Vaswani et al. (2017) (newstest2013 EN-DE dev "
        "perplexity per wordpiece and BLEU), typed by hand from memory of the paper, not "
        "measured here, for the paper's row that changes the same thing the same way (d_k "
        "halved/quartered: its d_k 32/16; N down/up: its N 2/8; d_model: 256/1024; d_ff: "
        "1024/4096). They are comparable with ours only in direction, not in value.", ""]
    lines += ["## Table 3, at laptop scale", ""]
    head = ["row", "N", "d_model", "d_ff", "h", "d_k", "P_drop", "eps_ls", "other", "params",
            "PPL (dev)", "BLEU (dev)", "exact", f"steps to {TARGET_EXACT:.0%}", "s/run",
            "paper PPL", "paper BLEU"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in [r for r in rows if r["base"] == "mt"]:
        rs = results_by_row.get(r["id"], [])
        whole = complete(rs, meta["seeds"])
        # Figures only from complete rows; an incomplete one says what is missing.
        shown = rs if whole else []
        ppl, bleu, ex = row_stats(shown, "ppl"), row_stats(shown, "bleu"), row_stats(shown, "exact")
        ok = [x for x in shown if x.get("status") == "ok"]
        params = str(ok[0]["params"]) if ok and ok[0].get("params") else ""
        wall = f"{statistics.fmean(x['wall_s'] for x in ok):.0f}" if ok else ""
        n = f" ({ppl['n']})" if ppl else ""
        if not rs:
            ppl_s = "not run yet"
        elif whole:
            ppl_s = fmt_stat(ppl, "ppl") + n
            note = status_cell(rs)
            ppl_s += f"; {note}" if note else ""
        else:
            ppl_s = "incomplete: " + incomplete_why(rs, meta["seeds"])
        paper = r["paper"]
        lines.append("| " + " | ".join([
            f"{r['id']}", cell(r, "N"), cell(r, "d_model"), cell(r, "d_ff"), cell(r, "h"),
            cell(r, "d_k"), cell(r, "P_drop"), cell(r, "eps_ls"), other_cell(r), params, ppl_s,
            fmt_stat(bleu, "bleu") if bleu else "—",
            (f"{statistics.fmean(ex['finite']):.1f}%" if ex and ex["finite"] else "—"),
            steps_cell(ok), wall,
            f"{paper[0]:.2f}" if paper else "—", f"{paper[1]:.1f}" if paper else "—"]) + " |")
    lines += ["", "(n) is the number of seeds with a result; `exact` is the mean held-out "
              f"exact-sequence accuracy (greedy); `steps to {TARGET_EXACT:.0%}` the mean step of "
              "the first held-out check at that exact match, over the seeds that reached it "
              "(k/n); s/run the mean wall time of one run.", ""]
    lines += ablate_lm.report_lines(rows, results_by_row, meta, fmt_stat, row_stats, complete,
                                    incomplete_why)
    lines += ablate_reverse.report_lines(rows, results_by_row, meta, fmt_stat, row_stats, complete,
                                         incomplete_why)
    lines += ["## The claims", ""]
    for c in CLAIMS:
        if not any(r["id"] in (c["better"], c["worse"]) for r in rows):
            continue
        verdict, detail = judge(c, results_by_row, seeds=meta["seeds"])
        lines.append(f"- **{c['id']}: {verdict}.** {c['text']}. {METRIC_NAME[c['metric']]}: "
                     f"{detail}.")
    lines += ["", "## Held-out perplexity against steps", ""]
    os.makedirs(plots_dir, exist_ok=True)
    groups = [g for g in GROUPS if any(r["group"] == g for r in rows)]
    for g in groups:
        if g in ablate_reverse.GROUPS:  # its figures are the longer set's, tabled above
            continue
        ids = [x for x in PLOT_WITH.get(g, []) if x in ROW_BY_ID] + \
            [r["id"] for r in rows if r["group"] == g]
        if not any(results_by_row.get(r["id"]) for r in rows if r["group"] == g):
            lines += [f"{GROUPS[g]}: not run yet.", ""]
            continue
        series = []
        for rid in dict.fromkeys(ids):
            rs = results_by_row.get(rid, [])
            seeds = [read_eval_curve(os.path.join(meta["results"], rid, str(x["seed"]),
                                                  "log.csv"))
                     for x in (rs if complete(rs, meta["seeds"]) else [])]
            series.append((f"{rid}: {ROW_BY_ID[rid]['label']}", seeds))
        svg = os.path.join(plots_dir, f"{g}.svg")
        write_plot_svg(svg, f"{GROUPS[g]}: held-out perplexity", series)
        lines += [f"![{GROUPS[g]}]({os.path.relpath(svg, rdir)})", ""]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines))
    os.replace(tmp, path)


# ---- main -------------------------------------------------------------------------------------
DEFAULT_REPORT = os.path.join(ROOT, "ABLATIONS.md")
DEFAULT_PLOTS = os.path.join(ROOT, "docs", "ablations")
HELP_RULES = """\
what it writes:
  Runs go to --results (one folder per row and seed; nothing else is written
  there). The --task folder is only read: one lacking a file the rows need is
  an error naming it (the committed task is rebuilt by
  tools/make_translation_task.py, never by this script).

  The report has figures and verdicts only for complete rows: a row is
  complete when every seed's training ran to its end (finished or diverged).
  A row with a crashed, refused or missing run is listed as incomplete, with
  why, and is run again on the next start.

  Without --report, the report is the committed ABLATIONS.md (plots in
  docs/ablations/), and it is replaced only by one holding at least as many
  seeds, steps per run and complete rows as it does: a trial run (fewer steps
  or seeds, fewer rows, crashed runs) leaves it as it is and says so. Naming
  --report (ABLATIONS.md itself too) writes that file whatever it held, with
  its plots in --plots (default: ablations/ beside it, or docs/ablations/ for
  ABLATIONS.md).

exit status: 0 when every run of this start trained (finished or diverged, or
  a row's flag is missing from the trainer), 1 when any crashed or was refused
  by the trainer, 130 when interrupted.
"""


def task_problem(task, rows):
    """The files of the --task folder (or the LM rows' corpus) the rows need
    that are missing, as an error, or None."""
    if any(r["base"] == "lm" for r in rows):
        problem = ablate_lm.corpus_problem(ROOT)
        if problem:
            return problem
    rows = [r for r in rows if r["base"] == "mt"]
    if not rows:
        return None
    need = ["train.tsv"] + sorted({f"{r['valid']}.tsv" for r in rows})
    missing = [f for f in need if not os.path.isfile(os.path.join(ROOT, task, f))]
    if not missing:
        return None
    hint = ""
    if os.path.abspath(os.path.join(ROOT, task)) == os.path.join(ROOT, TASK):
        hint = f" (python3 tools/make_translation_task.py {TASK} rebuilds it)"
    return f"ablate: --task {task} lacks {', '.join(missing)}{hint}"


def report_holds(path):
    """What the report at `path` holds: {"seeds", "steps", "rows"} (rows: the
    table rows with figures from every seed), None when there is no file, {}
    when it cannot be read as a report of this script."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    m = re.search(r"^- runs: (\d+) seed\(s\) per row, (\d+) steps each", text, re.M)
    if not m:
        return {}
    seeds, steps = int(m.group(1)), int(m.group(2))
    rows = 0
    for ln in text.splitlines():
        # Any table's figure cell: "1.06 ± 0.00 (3); ..." (Table 3's PPL, the LM rows' bits
        # per byte), one per row.
        cells = [c.strip().split(";")[0] for c in ln.split("|")] if ln.startswith("| ") else []
        n = next((re.search(r" ± \S+ \((\d+)\)$", c) for c in cells
                  if re.search(r" ± \S+ \((\d+)\)$", c)), None)
        rows += bool(n and int(n.group(1)) >= seeds)
    return {"seeds": seeds, "steps": steps, "rows": rows}


def why_not_replace(old, new):
    """None when a report holding `new` may replace the default report holding
    `old` (report_holds), else the reason, for a message."""
    if old is None:
        return None
    if not old:
        return "it cannot be read as a report of tools/ablate.py"
    if all(new[k] >= old[k] for k in ("seeds", "steps", "rows")):
        return None
    def held(h):
        return (f"{h['seeds']} seed{'s' * (h['seeds'] != 1)} of {h['steps']} "
                f"step{'s' * (h['steps'] != 1)}, {h['rows']} complete row{'s' * (h['rows'] != 1)}")
    return f"it holds {held(old)}; this report would hold {held(new)}"


def git_commit():
    try:
        c = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                           text=True, cwd=ROOT).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, cwd=ROOT).stdout.strip()
        return c + (" (with uncommitted changes)" if dirty else "") if c else "unknown"
    except OSError:
        return "unknown"


def select_rows(spec):
    if not spec or spec.lower() == "all":
        return list(ROWS)
    want = [s.strip() for s in spec.split(",") if s.strip()]
    out = [r for r in ROWS if r["group"] in want or r["id"] in want]
    unknown = [w for w in want if w not in GROUPS and w not in ROW_BY_ID]
    if unknown or not out:
        raise SystemExit(f"ablate: unknown rows {unknown or want}; groups are "
                         f"{', '.join(GROUPS)}, rows {', '.join(ROW_BY_ID)}")
    # A group is compared with the row its claims and plot name (base, or A-h1 for S).
    ids = {r["id"] for r in out}
    for r in out:
        ids |= set(PLOT_WITH.get(r["group"], []))
    return [r for r in ROWS if r["id"] in ids]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=HELP_RULES,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=os.environ.get("ABLATE_ROWS", "all"),
                    help="groups or row ids, comma-separated (A,B,C,D,E,S,N,P,base; "
                    "L,T,M: the GPT rows; R: the reverse task)")
    ap.add_argument("--seeds", type=int, default=int(os.environ.get("ABLATE_SEEDS", "3")))
    ap.add_argument("--steps", type=int, default=int(os.environ.get("ABLATE_STEPS", "1000")))
    ap.add_argument("--eval-every", type=int, default=0, help="default: steps / 10")
    ap.add_argument("--lm-steps", type=int,
                    default=int(os.environ.get("ABLATE_LM_STEPS", ablate_lm.STEPS)),
                    help="the GPT rows' steps (L, T: tools/ablate_lm.py; default %(default)s); "
                    "--steps and --eval-every are the translation rows'")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("ABLATE_JOBS", "2")))
    ap.add_argument("--bin", default="build/rel-f32/train")
    ap.add_argument("--task", default=TASK, help="a folder holding train.tsv, valid.tsv and "
                    "long.tsv (only read; default %(default)s)")
    ap.add_argument("--results", default="runs/ablate")
    ap.add_argument("--report", help="default: the committed ABLATIONS.md, replaced only by a "
                    "report holding as much (see below)")
    ap.add_argument("--plots", help="default: docs/ablations/ for ABLATIONS.md, else ablations/ "
                    "beside the report")
    ap.add_argument("--command", default="make ablate", help="the command named in the report")
    a = ap.parse_args(argv)
    if a.seeds < 1 or a.steps < 1 or a.jobs < 1:
        raise SystemExit("ablate: --seeds, --steps and --jobs must be at least 1")
    eval_every = a.eval_every or max(1, a.steps // 10)
    if a.lm_steps < 1:
        raise SystemExit("ablate: --lm-steps must be at least 1")
    ablate_lm.STEPS = a.lm_steps
    rows = select_rows(a.rows)
    binary = a.bin if os.path.isabs(a.bin) else os.path.join(ROOT, a.bin)
    if not os.access(binary, os.X_OK):
        rel = os.path.relpath(binary, ROOT)
        if rel.startswith(".."):  # make builds only inside the tree
            rel = "build/rel-f32/train"
        raise SystemExit(f"ablate: {a.bin} is not built (make -C {ROOT} {rel})")
    task = a.task
    problem = task_problem(task, rows)
    if problem:
        raise SystemExit(problem)
    if any(r["base"] == "lm" for r in rows):
        ablate_lm.prepare(ROOT)
    report = os.path.abspath(a.report) if a.report else DEFAULT_REPORT
    plots = os.path.abspath(a.plots) if a.plots else \
        DEFAULT_PLOTS if report == DEFAULT_REPORT else \
        os.path.join(os.path.dirname(report), "ablations")
    report_name = a.report or os.path.relpath(DEFAULT_REPORT, ROOT)
    results_dir = os.path.abspath(a.results)
    commit = git_commit()
    jobs = [(r, s) for s in range(1, a.seeds + 1) for r in rows]  # every row's seed 1 first
    bases = {r["base"] for r in rows}
    steps = " / ".join(([f"{a.steps}"] if "mt" in bases else []) +
                       ([f"{a.lm_steps} (GPT rows)"] if "lm" in bases else []) +
                       ([f"{ablate_reverse.STEPS} (reverse rows)"] if "rev" in bases else []))
    print(f"ablate: {len(rows)} rows x {a.seeds} seeds = {len(jobs)} runs of {steps} steps, "
          f"{a.jobs} at once; results in {a.results}", flush=True)
    lock = threading.Lock()
    done = [0]
    results = {}
    t0 = time.time()

    def one(job):
        r, s = job
        if STOP.is_set():
            return
        res = run_one(binary, r, s, a.steps, eval_every, task, results_dir, commit)
        if res["status"] == "interrupted":
            return
        with lock:
            done[0] += 1
            results.setdefault(r["id"], []).append(res)
            if res["status"] == "ok" and r["base"] == "lm":
                what = f"{res.get('bpb', float('nan')):.4f} bits per byte, ppl {res['ppl']:.3f}"
            elif res["status"] == "ok" and r["base"] == "rev":
                what = (f"longer set: ppl {res.get('long_ppl', float('nan')):.3f}, exact "
                        f"{res.get('long_exact', float('nan')):.1f}%; held-out exact "
                        f"{res.get('exact', 0):.1f}%")
            elif res["status"] == "ok":
                what = (f"ppl {res['ppl']:.3f}, BLEU {res.get('bleu', float('nan')):.2f}, "
                        f"exact {res.get('exact', 0):.1f}%")
            else:
                what = res.get("reason", res["status"])
            took = "reused" if res.get("reused") else f"{res['wall_s']:.0f} s"
            print(f"[{done[0]:3d}/{len(jobs)}] {r['id']:<15} seed {s}: {what} ({took})", flush=True)

    ex = concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs)
    futures = [ex.submit(one, j) for j in jobs]
    try:
        for fut in futures:
            fut.result()
    except KeyboardInterrupt:
        STOP.set()
        ex.shutdown(wait=True, cancel_futures=True)
        print(f"\nablate: interrupted after {done[0]} of {len(jobs)} runs; the runs written stay "
              f"in {a.results}, and the same command resumes from them", flush=True)
        return 130
    ex.shutdown()
    wall = time.time() - t0
    this_start = [x for rs in results.values() for x in rs]
    counts = {}
    for rs in results.values():
        for x in rs:
            counts[x["status"]] = counts.get(x["status"], 0) + 1
    reused = sum(1 for rs in results.values() for x in rs if x.get("reused"))
    summary = (f"this start: {len(jobs)} runs of {len(rows)} rows "
               f"({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}; "
               f"{reused} reused from an earlier start), {wall / 60:.1f} min of wall time")
    # The report covers every row: those run now and those an earlier start
    # wrote with the same settings (ABLATE_ROWS=A, then B, ... build one table).
    results = {}
    for r in ROWS:
        for s in range(1, a.seeds + 1):
            res = stored_result(results_dir, r, s, command(binary, r, s, a.steps, eval_every, task))
            if res is not None:
                results.setdefault(r["id"], []).append(res)
    meta = {"command": a.command, "commit": commit, "machine": machine(), "seeds": a.seeds,
            "steps": a.steps, "eval_every": eval_every, "jobs": a.jobs, "summary": summary,
            "results": results_dir,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    print(f"\nablate: {summary}")
    for c in CLAIMS:
        if all(i in results for i in (c["better"], c["worse"])):
            v, _ = judge(c, results, seeds=a.seeds)
            print(f"  {c['id']:<3} {v:<28} {c['text'][:70]}")
    holds = {"seeds": a.seeds, "steps": a.steps,
             "rows": sum(complete(results.get(r["id"], []), a.seeds) for r in ROWS)}
    why = None if a.report else why_not_replace(report_holds(report), holds)
    if why:
        print(f"{report_name} not replaced: {why}. The runs stay in {a.results}; "
              f"--report PATH writes a report from them (--report {report_name} replaces it).")
    else:
        write_report(report, plots, results, ROWS, meta)
        print(f"wrote {report_name} and the plots in {os.path.relpath(plots)}/")
    rc = 0
    for status, what in (("crashed", "crashed"), ("not run", "were refused by the trainer")):
        bad = [x for x in this_start if x["status"] == status and
               not x.get("reason", "").startswith("not run: the trainer has no flag")]
        if bad:
            rc = 1
            print(f"ablate: {len(bad)} of {len(jobs)} runs {what} (output.txt in "
                  f"{a.results}/<row>/<seed>/):", file=sys.stderr)
            for x in bad:
                print(f"  {x['row']} seed {x['seed']}: {x.get('reason', status)}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
