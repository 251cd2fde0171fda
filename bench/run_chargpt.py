#!/usr/bin/python3
"""The real workload: a character-level GPT trained by qkv's trainer and by
the minimal PyTorch GPT (bench/chargpt_torch.py), side by side, and the time
each takes to reach a held-out loss (issue 39 item 5). Writes the
"Character-level GPT" section of this machine's kind in BENCHMARKS.md (between
<!-- chargpt-KIND:begin --> and <!-- chargpt-KIND:end -->, KIND avx512, avx2, or
avx2-emulated as bench/run.sh names the training-step blocks), leaving the rest
of the report, the other kinds' sections included, as it is.

    /usr/bin/python3 bench/run_chargpt.py build/rel-f32

The model is the one people train first, in nanoGPT's CPU shape (4 layers,
4 heads, d_model 128, d_ff 512, context 64, batch 12); the text is the prose
corpus of the llama-style GPT (build/datasets/prose, `make prose`: train.txt,
and valid64k.txt held out). Both sides train with nanoGPT's CPU recipe: AdamW,
lr 1e-3, betas 0.9/0.99, weight decay 0.1, warm-up 100, cosine to 1e-4, clip
1, no dropout, 2000 steps, and score the same held-out bytes the same way
(consecutive windows, every character once) every CHARGPT_EVAL_EVERY steps,
the clock stopped while they score: evaluation time is counted on neither
side.

Each round trains, with the round's number as the seed, qkv and PyTorch at
each thread count and each precision (fp32; bf16 where the CPU has
AVX512-BF16 and the library was built for it: qkv --precision bf16, PyTorch
torch.autocast('cpu', torch.bfloat16)), interleaved. The target is the median
over the rounds of the held-out loss PyTorch float32 reaches at the last step
(at its fewest threads); each run's time to it is the training time at the
first evaluation at or below it, and a side's figure is the median over
seeds (a seed that never reaches it counts as never).

Environment:
  CHARGPT_STEPS       training steps per run (default 2000)
  CHARGPT_ROUNDS      rounds (default 3): seeds 1..N
  CHARGPT_THREADS     thread counts (default "1 2")
  CHARGPT_PRECISIONS  default "fp32 bf16" on an AVX512-BF16 machine whose
                      library uses it, else "fp32"
  CHARGPT_EVAL_EVERY  steps between held-out scorings (default 100)
  BENCH_OUT           report path (default BENCHMARKS.md at the top of the tree)
"""

import csv
import json
import os
import re
import shutil
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

SHAPE = ["--layers", "4", "--heads", "4", "--d-model", "128", "--d-ff", "512",
         "--context", "64", "--batch", "12"]
TOKENS_PER_STEP = 12 * 64  # batch x context: every position carries a loss
# nanoGPT's CPU recipe (its README's MacBook run), the same on both sides.
RECIPE = ["--lr", "1e-3", "--min-lr", "1e-4", "--warmup", "100", "--optimizer", "adamw",
          "--beta2", "0.99", "--weight-decay", "0.1"]


def cpu_line():
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        info = f.read()
    m = re.search(r"model name\s*:\s*(.*)", info)
    if m:
        model = m.group(1).strip()
    avx512 = sum(1 for line in info.splitlines()
                 if line.startswith("flags") and " avx512f" in line)
    isa = "AVX-512" if avx512 else "AVX2, no AVX-512"
    return model, avx512, isa


# Each instruction set's figures have a section of their own, as the training
# steps do (bench/run.sh): AVX-512, AVX2 only, and AVX2 run on an AVX-512
# machine (a library built for AVX2 there, or OPENBLAS_CORETYPE set).
KIND_TITLES = {"avx512": "AVX-512 machines", "avx2": "AVX2-only machines",
               "avx2-emulated": "AVX2 emulated on an AVX-512 machine (for A/B comparisons only)"}


def isa_kind(build_dir, avx512):
    """avx512, avx2 or avx2-emulated: this machine and the library's build."""
    if not avx512:
        return "avx2"
    built = ""
    try:
        with open(os.path.join(build_dir, "pkgconfig", "qkv.pc")) as f:
            built = next((l.split("=", 1)[1].strip() for l in f if l.startswith("isa=")), "")
    except OSError:
        pass
    return "avx512" if built == "avx512f" and not os.environ.get("OPENBLAS_CORETYPE") else \
        "avx2-emulated"


def run(cmd):
    """stdout and the peak RSS in MB of this child alone (wait4's rusage)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            sys.exit(f"run_chargpt.py: {' '.join(cmd)} failed ({p.returncode}):\n"
                     f"{err.read()[-2000:]}")
        return out.read(), usage.ru_maxrss / 1024


def qkv_run(train, prose, steps, threads, seed, precision, every, work):
    out_dir = os.path.join(work, f"qkv-{threads}-{precision}-{seed}")
    out, rss = run([train, "--model", "gpt", "--format", "text",
                    "--data", os.path.join(prose, "train.txt"),
                    "--valid", os.path.join(prose, "valid64k.txt"), *SHAPE, *RECIPE,
                    "--clip", "1", "--dropout", "0", "--steps", str(steps),
                    "--eval-every", str(every), "--no-early-stop", "--no-save",
                    "--precision", precision, "--threads", str(threads),
                    "--seed", str(seed), "--out", out_dir])
    m = re.search(r"trained (\d+) steps in [\d.]+ s \(([\d.]+) ms/step", out)
    if not m:
        sys.exit("run_chargpt.py: could not read the trainer's summary:\n" + out[-2000:])
    # log.csv: a training row per step (tokens_per_s = tokens so far / training
    # seconds so far, evaluations excluded) and a row per evaluation.
    seconds, curve = {}, []
    with open(os.path.join(out_dir, "log.csv")) as f:
        for r in csv.DictReader(f):
            step = int(r["step"])
            if r["tokens_per_s"]:
                seconds[step] = step * TOKENS_PER_STEP / float(r["tokens_per_s"])
            elif r["heldout_loss"]:
                curve.append([step, seconds[step], float(r["heldout_loss"])])
    if not curve or curve[-1][0] != steps:
        sys.exit(f"run_chargpt.py: {out_dir}/log.csv has no held-out loss at step {steps}")
    return {"side": "qkv", "threads": threads, "seed": seed, "precision": precision,
            "ms_per_step": float(m.group(2)), "heldout_loss": curve[-1][2], "curve": curve,
            "peak_rss_mb": rss}


def torch_run(prose, steps, threads, seed, precision, every):
    out, rss = run(["/usr/bin/python3", os.path.join(HERE, "chargpt_torch.py"),
                    "--data", os.path.join(prose, "train.txt"),
                    "--valid", os.path.join(prose, "valid64k.txt"), *SHAPE, *RECIPE,
                    "--steps", str(steps), "--eval-every", str(every), "--threads", str(threads),
                    "--autocast", "bf16" if precision == "bf16" else "none",
                    "--seed", str(seed), "--json"])
    r = json.loads(out.strip().splitlines()[-1])
    r["peak_rss_mb"] = rss
    return r


def time_to(run, target):
    """Training seconds at the first evaluation at or below target, else None."""
    return next((t for _, t, loss in run["curve"] if loss <= target), None)


def median_time(runs, target):
    """The median over seeds, a seed that never reached the target counting as never."""
    times = sorted(float("inf") if time_to(r, target) is None else time_to(r, target)
                   for r in runs)
    return statistics.median(times) if times else None


def fmt_time(t):
    return "not reached" if t is None or t == float("inf") else f"{t:.1f} s"


def fmt_losses(runs):
    losses = [r["heldout_loss"] for r in sorted(runs, key=lambda r: r["seed"])]
    each = " / ".join(f"{x:.4f}" for x in losses)
    return f"{statistics.median(losses):.4f} ({each})"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: /usr/bin/python3 bench/run_chargpt.py <build-dir>")
    train = os.path.join(sys.argv[1], "train")
    if not os.access(train, os.X_OK):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        rel = os.path.relpath(os.path.abspath(train), root)
        if rel.startswith(".."):  # make builds only inside the tree
            rel = "build/rel-f32/train"
        sys.exit(f"run_chargpt.py: {train} not found (build it with make -C {root} {rel})")
    prose = os.path.join(ROOT, "build", "datasets", "prose")
    if not os.path.exists(os.path.join(prose, "valid.txt")):
        sys.exit(f"run_chargpt.py: {prose}/valid.txt not found (make prose builds it)")
    prepare_heldout(ROOT)  # valid64k.txt: valid.txt's first 64 KiB, cut at a line end
    steps = int(os.environ.get("CHARGPT_STEPS", "2000"))
    rounds = int(os.environ.get("CHARGPT_ROUNDS", "3"))
    threads = [int(t) for t in os.environ.get("CHARGPT_THREADS", "1 2").split()]
    every = int(os.environ.get("CHARGPT_EVAL_EVERY", "100"))
    out_path = os.environ.get("BENCH_OUT", os.path.join(ROOT, "BENCHMARKS.md"))
    model, avx512, isa = cpu_line()
    kind = isa_kind(sys.argv[1], avx512)
    with open("/proc/cpuinfo") as f:
        bf16_cpus = sum(1 for l in f if l.startswith("flags") and " avx512_bf16" in l)
    precisions = os.environ.get(
        "CHARGPT_PRECISIONS", "fp32 bf16" if kind == "avx512" and bf16_cpus else "fp32").split()
    with open(os.path.join(prose, "train.txt"), "rb") as f:
        size = len(f.read())
    held = os.path.getsize(os.path.join(prose, "valid64k.txt"))

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = os.getloadavg()[0]
    work = tempfile.mkdtemp(prefix="qkv-chargpt.")
    runs = []
    for r in range(1, rounds + 1):
        for t in threads:
            for p in precisions:
                q = qkv_run(train, prose, steps, t, r, p, every, work)
                x = torch_run(prose, steps, t, r, p, every)
                runs += [q, x]
                print(f"round {r}, {t} thread(s), {p}: qkv {q['ms_per_step']:.2f} ms/step, "
                      f"held-out {q['heldout_loss']:.4f}; PyTorch {x['ms_per_step']:.2f} ms/step, "
                      f"held-out {x['heldout_loss']:.4f}", flush=True)
    load1 = os.getloadavg()[0]
    shutil.rmtree(work)
    torch_version = next(x["torch"] for x in runs if x["side"] == "pytorch")
    vocab = next(x["vocab"] for x in runs if x["side"] == "pytorch")
    params = next(x["parameters"] for x in runs if x["side"] == "pytorch")

    def side(name, t=None, p=None):
        return [x for x in runs if x["side"] == name and (t is None or x["threads"] == t)
                and (p is None or x["precision"] == p)]

    ref = side("pytorch", min(threads), "fp32")
    target = statistics.median(x["heldout_loss"] for x in ref)

    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    # (the report, which make bench-torch rewrites just before, does not count)
    dirty = [line for line in subprocess.run(
        ["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True).stdout.splitlines()
        if not line.endswith(" " + os.path.basename(out_path))]
    L = [f"<!-- chargpt-{kind}:begin -->",
         f"## Character-level GPT, the model people train first: {KIND_TITLES[kind]}", ""]
    L.append(
        f"Commit {commit}{' (with uncommitted changes)' if dirty else ''}, {started}, "
        f"{model}, {os.cpu_count()} cores; `grep -c avx512f /proc/cpuinfo` = {avx512}, "
        f"`grep -c avx512_bf16 /proc/cpuinfo` = {bf16_cpus} ({isa}). Load average {load0:.1f} "
        f"at the start, {load1:.1f} at the end (this VM idles near 1).")
    L += ["", f"Command: `CHARGPT_STEPS={steps} CHARGPT_ROUNDS={rounds} "
          f"CHARGPT_PRECISIONS=\"{' '.join(precisions)}\" /usr/bin/python3 "
          f"bench/run_chargpt.py build/rel-f32` (`make bench-torch` runs it; BENCH_CHARGPT=0 skips it).",
          "",
          f"GPT, 4 layers, 4 heads, d_model 128, d_ff 512, context 64, batch 12, vocabulary "
          f"{vocab} (the text's characters and 4 specials), Pre-LN, GELU, learned positions, tied "
          f"output weights, dropout 0: {params:,} parameters. Text: the prose corpus "
          f"(build/datasets/prose, `make prose`; train.txt, {size:,} bytes; held out: "
          f"valid64k.txt, {held:,} bytes). nanoGPT's CPU recipe on both sides: AdamW, lr 1e-3, "
          f"betas 0.9/0.99, weight decay 0.1 on the linear layers' weights, warm-up 100, cosine "
          f"to 1e-4, gradient norm clipped to 1, {steps} steps; the held-out bytes scored every "
          f"{every} steps with the clock stopped (evaluation counted on neither side).",
          "",
          "qkv: `train --model gpt --data train.txt --valid valid64k.txt --format text "
          "--layers 4 --heads 4 --d-model 128 --d-ff 512 --context 64 --batch 12 "
          + " ".join(RECIPE) + " --clip 1 --dropout 0 --precision P --threads N`; its training "
          "seconds from log.csv. PyTorch "
          f"{torch_version} (Debian python3-torch): bench/chargpt_torch.py, the minimal GPT "
          "(stacked QKV linear, masked softmax, GELU MLP), bf16 as "
          "`torch.autocast('cpu', dtype=torch.bfloat16)`. The two do not share weights or "
          "batches (each initialises and samples its own), so their held-out losses compare "
          "over seeds.",
          "",
          f"### Time to a held-out loss of {target:.4f}",
          "",
          f"The target: the median over {len(ref)} seeds of the held-out loss PyTorch float32 "
          f"reaches at step {steps} ({min(threads)} thread{'s' if min(threads) > 1 else ''}). "
          "Time: training seconds to the first evaluation at or below it, median over seeds "
          "(each seed's in brackets).",
          "",
          "| threads | precision | qkv | PyTorch | qkv faster by |",
          "|---:|---|---|---|---:|"]

    def times(rs):
        return " / ".join(fmt_time(time_to(r, target)) for r in sorted(rs, key=lambda r: r["seed"]))

    for t in threads:
        for p in precisions:
            tq = median_time(side("qkv", t, p), target)
            tp = median_time(side("pytorch", t, p), target)
            ratio = (f"{tp / tq:.2f}x" if tq not in (None, float("inf")) and
                     tp not in (None, float("inf")) else "")
            L.append(f"| {t} | {p} | {fmt_time(tq)} ({times(side('qkv', t, p))}) | "
                     f"{fmt_time(tp)} ({times(side('pytorch', t, p))}) | {ratio} |")
    L += ["", "### Step time and the loss at the end", "",
          "| threads | precision | qkv ms/step | PyTorch ms/step | qkv faster by | "
          f"held-out loss at {steps}, qkv: median (per seed) | PyTorch |",
          "|---:|---|---:|---:|---:|---|---|"]
    for t in threads:
        for p in precisions:
            q = min(x["ms_per_step"] for x in side("qkv", t, p))
            b = min(x["ms_per_step"] for x in side("pytorch", t, p))
            L.append(f"| {t} | {p} | {q:.2f} | {b:.2f} | {b / q:.2f}x | "
                     f"{fmt_losses(side('qkv', t, p))} | {fmt_losses(side('pytorch', t, p))} |")
    L += ["", "ms/step: each side's fastest seed at that setting.", "", "Every run:", "",
          "| round (seed) | threads | precision | side | ms/step | held-out loss | peak RSS MB |",
          "|---:|---:|---|---|---:|---:|---:|"]
    for x in runs:
        L.append(f"| {x['seed']} | {x['threads']} | {x['precision']} | "
                 f"{'qkv' if x['side'] == 'qkv' else 'PyTorch'} | {x['ms_per_step']:.2f} | "
                 f"{x['heldout_loss']:.4f} | {x['peak_rss_mb']:.1f} |")
    L += ["", "Peak RSS: the process's (wait4), PyTorch's with the interpreter.",
          f"<!-- chargpt-{kind}:end -->"]
    write_section(out_path, f"chargpt-{kind}", L)
    print(f"wrote the Character-level GPT section of {out_path}")


if __name__ == "__main__":
    main()
