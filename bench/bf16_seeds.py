#!/usr/bin/python3
"""Does a bf16 run learn what a float32 run learns? (issue 39 item 3)

    /usr/bin/python3 bench/bf16_seeds.py build/rel-f32        (make bf16-seeds)

Trains two models at --precision fp32 and at --precision bf16, with seeds
1..BF16_SEEDS each (the same seed gives both precisions the same initial
weights and the same batches, so a pair differs only by bf16's rounding):

  demo      `train --task reverse` as `make demo` runs it (1000 steps), with
            --no-early-stop so that every run takes all its steps; scored by
            the held-out cross-entropy (teacher-forced) at every evaluation
            (every 250 steps: the learning curve, before the task saturates)
            and the exact-sequence accuracy (greedy) at the end, on its 1000
            held-out sequences
  char GPT  the character-level GPT of the benchmarks (4 layers, 4 heads,
            width 128, context 64, batch 12) on the prose corpus
            (build/datasets/prose, `make prose`), nanoGPT's CPU recipe
            (AdamW lr 1e-3, betas 0.9/0.99, weight decay 0.1, warm-up 100,
            cosine to 1e-4, clip 1, no dropout), 2000 steps; scored by the
            held-out loss on valid64k.txt every 500 steps

and writes the table between <!-- bf16-seeds:begin/end --> in BENCHMARKS.md
(BENCH_OUT overrides). Losses do not depend on the machine's load, so this
can run beside other work; it runs at BF16_THREADS (default 1) thread(s).

The verdict a row gets: "same" when bf16's mean over the seeds lies within
fp32's range (min to max), "close" when it is within one such range of fp32's
mean, "differs" otherwise; the per-seed differences (bf16 - fp32, same seed)
are listed too.

Environment: BF16_SEEDS (3), BF16_THREADS (1), BF16_GPT_STEPS (2000),
BF16_DEMO_STEPS (1000), BF16_TASKS ("demo chargpt"), BENCH_OUT.
"""

import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from report_section import write_section  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tools"))
from ablate_lm import prepare as prepare_heldout  # noqa: E402  (valid64k.txt, the LM rows' held-out)

GPT_SHAPE = ["--layers", "4", "--heads", "4", "--d-model", "128", "--d-ff", "512",
             "--context", "64", "--batch", "12"]
# nanoGPT's CPU recipe (its README's "I only have a MacBook" run), as issue 39 item 5 sets it.
NANOGPT = ["--optimizer", "adamw", "--lr", "1e-3", "--beta1", "0.9", "--beta2", "0.99",
           "--weight-decay", "0.1", "--warmup", "100", "--min-lr", "1e-4", "--clip", "1",
           "--dropout", "0"]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bf16_seeds.py: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}"
                 f"{p.stdout[-1000:]}")
    return p.stdout


def curve(out, steps):
    """{step: held-out loss} from the run's log.csv (every evaluation)."""
    with open(os.path.join(out, "log.csv")) as f:
        rows = {int(r["step"]): float(r["heldout_loss"]) for r in csv.DictReader(f)
                if r["heldout_loss"]}
    if steps not in rows:
        sys.exit(f"bf16_seeds.py: {out}/log.csv has no held-out loss at step {steps}")
    return rows


def demo(train, precision, seed, threads, steps, out):
    text = run([train, "--task", "reverse", "--steps", str(steps), "--no-early-stop",
                "--eval-every", str(steps // 4), "--precision", precision, "--seed", str(seed),
                "--threads", str(threads), "--no-save", "--out", out])
    acc = re.search(r"held-out exact-sequence accuracy: ([\d.]+)%", text)
    if not acc:
        sys.exit("bf16_seeds.py: no held-out line in the demo's output:\n" + text[-2000:])
    return {"loss": curve(out, steps), "exact": float(acc.group(1))}


def chargpt(train, precision, seed, threads, steps, out, prose):
    run([train, "--model", "gpt", "--format", "text", "--data", os.path.join(prose, "train.txt"),
         "--valid", os.path.join(prose, "valid64k.txt"), *GPT_SHAPE, *NANOGPT,
         "--steps", str(steps), "--eval-every", str(steps // 4), "--no-early-stop",
         "--precision", precision, "--seed", str(seed), "--threads", str(threads),
         "--no-save", "--out", out])
    return {"loss": curve(out, steps)}


def verdict(fp, bf):
    lo, hi, mean = min(fp), max(fp), statistics.mean(fp)
    b = statistics.mean(bf)
    if lo <= b <= hi:
        return "same (bf16's mean within fp32's range)"
    if abs(b - mean) <= (hi - lo):
        return "close (within one fp32 range of fp32's mean)"
    return "differs"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: /usr/bin/python3 bench/bf16_seeds.py <build-dir>")
    train = os.path.join(sys.argv[1], "train")
    if not os.access(train, os.X_OK):
        sys.exit(f"bf16_seeds.py: {train} not found (make build/rel-f32/train)")
    seeds = range(1, int(os.environ.get("BF16_SEEDS", "3")) + 1)
    threads = int(os.environ.get("BF16_THREADS", "1"))
    gpt_steps = int(os.environ.get("BF16_GPT_STEPS", "2000"))
    demo_steps = int(os.environ.get("BF16_DEMO_STEPS", "1000"))
    tasks = os.environ.get("BF16_TASKS", "demo chargpt").split()
    out_path = os.environ.get("BENCH_OUT", os.path.join(ROOT, "BENCHMARKS.md"))
    prose = os.path.join(ROOT, "build", "datasets", "prose")
    if "chargpt" in tasks:
        if not os.path.exists(os.path.join(prose, "valid.txt")):
            sys.exit(f"bf16_seeds.py: {prose}/valid.txt not found (make prose builds it)")
        prepare_heldout(ROOT)  # valid64k.txt: valid.txt's first 64 KiB, cut at a line end
    header = run([train, "--task", "reverse", "--steps", "1", "--warmup", "1", "--precision",
                  "bf16", "--no-save", "--out", tempfile.mkdtemp(prefix="qkv-bf16-")])
    kernel = re.search(r"precision: bf16 .*", header)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    work = tempfile.mkdtemp(prefix="qkv-bf16-seeds.")
    results = {}
    for task in tasks:
        for seed in seeds:
            for precision in ("fp32", "bf16"):
                out = os.path.join(work, f"{task}-{precision}-{seed}")
                t0 = time.time()
                r = (demo(train, precision, seed, threads, demo_steps, out) if task == "demo"
                     else chargpt(train, precision, seed, threads, gpt_steps, out, prose))
                results.setdefault(task, {}).setdefault(precision, {})[seed] = r
                print(f"{task} seed {seed} {precision}: {json.dumps(r)} ({time.time() - t0:.0f} s)",
                      flush=True)
    with open("/proc/cpuinfo") as f:
        info = f.read()
    bf16_cpus = sum(1 for l in info.splitlines() if l.startswith("flags") and "avx512_bf16" in l)
    L = ["<!-- bf16-seeds:begin -->",
         "## bf16 learns what float32 learns (issue 39 item 3)", "",
         f"- Command: `BF16_SEEDS={len(seeds)} BF16_THREADS={threads} /usr/bin/python3 "
         f"bench/bf16_seeds.py build/rel-f32` (`make bf16-seeds`)",
         f"- Commit {commit}, {started}; `grep -c avx512_bf16 /proc/cpuinfo` = {bf16_cpus}; "
         f"the trainer said: {kernel.group(0) if kernel else '(no precision line)'}",
         "- demo: `train --task reverse --no-early-stop` (make demo's run, all "
         f"{demo_steps} steps), held-out cross-entropy (teacher-forced) every {demo_steps // 4} "
         "steps and exact-sequence accuracy at the end, on its 1000 held-out sequences",
         "- char GPT: 4 layers, 4 heads, width 128, context 64, batch 12 on "
         "build/datasets/prose (train.txt; valid64k.txt held out), nanoGPT's CPU recipe "
         "(`" + " ".join(NANOGPT) + f"`), {gpt_steps} steps, held-out loss every {gpt_steps // 4} steps",
         "- A seed gives both precisions the same initial weights and batches: a pair "
         "differs by bf16's rounding alone.", "",
         "| task | measure | fp32 per seed | bf16 per seed | fp32 mean (range) | "
         "bf16 mean (range) | bf16 - fp32 per seed | verdict |",
         "|---|---|---|---|---|---|---|---|"]
    for task, by in results.items():
        name = "demo (reverse)" if task == "demo" else "char GPT"
        measures = [(("loss", step), f"held-out loss, step {step}", 4)
                    for step in sorted(by["fp32"][1]["loss"])]
        if "exact" in by["fp32"][1]:
            measures.append((("exact", None), "exact-sequence % at the end", 2))
        for (key, step), label, nd in measures:
            def get(p, s):
                v = by[p][s][key]
                return v[step] if step is not None else v
            fp = [get("fp32", s) for s in seeds]
            bf = [get("bf16", s) for s in seeds]
            L.append(
                f"| {name} | {label} | {' / '.join(f'{x:.{nd}f}' for x in fp)} | "
                f"{' / '.join(f'{x:.{nd}f}' for x in bf)} | {statistics.mean(fp):.{nd}f} "
                f"({min(fp):.{nd}f}-{max(fp):.{nd}f}) | {statistics.mean(bf):.{nd}f} "
                f"({min(bf):.{nd}f}-{max(bf):.{nd}f}) | "
                f"{' / '.join(f'{b - a:+.{nd}f}' for a, b in zip(fp, bf))} | "
                f"{verdict(fp, bf)} |")
    L += ["", "Verdict: \"same\" when bf16's mean over the seeds lies within fp32's range, "
          "\"close\" when within one fp32 range of fp32's mean, \"differs\" otherwise.",
          "<!-- bf16-seeds:end -->"]
    write_section(out_path, "bf16-seeds", L)
    print(f"wrote the bf16-seeds section of {out_path}")


if __name__ == "__main__":
    main()
