#!/usr/bin/python3
"""The real workload: a character-level GPT trained by qkv's trainer and by
the minimal PyTorch GPT (bench/chargpt_torch.py), side by side. Writes the
"Character-level GPT" section of this machine's kind in BENCHMARKS.md (between
<!-- chargpt-KIND:begin --> and <!-- chargpt-KIND:end -->, KIND avx512, avx2, or
avx2-emulated as bench/run.sh names the training-step blocks), leaving the rest
of the report, the other kinds' sections included, as it is.

    /usr/bin/python3 bench/run_chargpt.py build/rel-f32

The model is the one people train first (4 layers, 4 heads, d_model 128,
d_ff 512, context 64, batch 12, a vocabulary of ~90 characters); the text is
every file under /usr/share/common-licenses, in name order (237 KB on
Debian 12, on every Debian machine). Each round trains qkv at each thread
count and PyTorch at each thread count, interleaved, with the round's
number as the seed, for the same number of steps with the same schedule.
A side's ms/step is its fastest round; held-out losses are given for every
seed and as a mean.

Environment:
  CHARGPT_STEPS    training steps per run (default 1000)
  CHARGPT_ROUNDS   rounds (default 2): seeds 1..N
  CHARGPT_THREADS  thread counts (default "1 2")
  BENCH_OUT        report path (default BENCHMARKS.md at the top of the tree)
"""

import glob
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

SHAPE = ["--layers", "4", "--heads", "4", "--d-model", "128", "--d-ff", "512",
         "--context", "64", "--batch", "12"]


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


def qkv_run(train, corpus, steps, threads, seed, work):
    out, rss = run([train, "--model", "gpt", "--data", corpus, "--format", "text", *SHAPE,
                    "--steps", str(steps), "--warmup", str(min(100, steps)), "--dropout", "0", "--eval-every", str(steps),
                    "--no-early-stop", "--no-save", "--threads", str(threads),
                    "--seed", str(seed), "--out", os.path.join(work, f"qkv-{threads}-{seed}")])
    m = re.search(r"trained (\d+) steps in [\d.]+ s \(([\d.]+) ms/step", out)
    h = re.search(r"held-out \((\d+) tokens\): loss ([\d.]+)", out)
    if not m or not h:
        sys.exit("run_chargpt.py: could not read the trainer's summary:\n" + out[-2000:])
    return {"side": "qkv", "threads": threads, "seed": seed, "ms_per_step": float(m.group(2)),
            "heldout_loss": float(h.group(2)), "heldout_tokens": int(h.group(1)),
            "peak_rss_mb": rss}


def torch_run(corpus, steps, threads, seed):
    out, _ = run(["/usr/bin/python3", os.path.join(HERE, "chargpt_torch.py"), "--data", corpus,
                  *SHAPE, "--steps", str(steps), "--warmup", str(min(100, steps)),
                  "--threads", str(threads),
                  "--seed", str(seed), "--json"])
    return json.loads(out.strip().splitlines()[-1])


def fmt_losses(runs):
    losses = [r["heldout_loss"] for r in sorted(runs, key=lambda r: r["seed"])]
    each = " / ".join(f"{x:.4f}" for x in losses)
    return f"{statistics.mean(losses):.4f} ({each})"


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
    steps = int(os.environ.get("CHARGPT_STEPS", "1000"))
    rounds = int(os.environ.get("CHARGPT_ROUNDS", "2"))
    threads = [int(t) for t in os.environ.get("CHARGPT_THREADS", "1 2").split()]
    out_path = os.environ.get("BENCH_OUT", os.path.join(ROOT, "BENCHMARKS.md"))

    files = sorted(f for f in glob.glob("/usr/share/common-licenses/*")
                   if os.path.isfile(f) and not os.path.islink(f))
    if not files:
        sys.exit("run_chargpt.py: no text under /usr/share/common-licenses")
    work = tempfile.mkdtemp(prefix="qkv-chargpt.")
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "wb") as out:
        for f in files:
            with open(f, "rb") as fh:
                out.write(fh.read())
    size = os.path.getsize(corpus)

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = os.getloadavg()[0]
    runs = []
    for r in range(1, rounds + 1):
        for t in threads:
            q = qkv_run(train, corpus, steps, t, r, work)
            p = torch_run(corpus, steps, t, r)
            runs += [q, p]
            print(f"round {r}, {t} thread(s): qkv {q['ms_per_step']:.2f} ms/step, held-out "
                  f"{q['heldout_loss']:.4f}; PyTorch {p['ms_per_step']:.2f} ms/step, held-out "
                  f"{p['heldout_loss']:.4f}", flush=True)
    load1 = os.getloadavg()[0]
    shutil.rmtree(work)
    torch_version = next(x["torch"] for x in runs if x["side"] == "pytorch")
    vocab = next(x["vocab"] for x in runs if x["side"] == "pytorch")
    params = next(x["parameters"] for x in runs if x["side"] == "pytorch")

    def side(name, t=None):
        return [x for x in runs if x["side"] == name and (t is None or x["threads"] == t)]

    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    # (the report, which make bench-torch rewrites just before, does not count)
    dirty = [line for line in subprocess.run(
        ["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True).stdout.splitlines()
        if not line.endswith(" " + os.path.basename(out_path))]
    model, avx512, isa = cpu_line()
    kind = isa_kind(sys.argv[1], avx512)
    L = [f"<!-- chargpt-{kind}:begin -->",
         f"## Character-level GPT, the model people train first: {KIND_TITLES[kind]}", ""]
    L.append(
        f"Commit {commit}{' (with uncommitted changes)' if dirty else ''}, {started}, "
        f"{model}, {os.cpu_count()} cores; `grep -c avx512f /proc/cpuinfo` = {avx512} ({isa}). "
        f"Load average {load0:.1f} at the start, {load1:.1f} at the end (this VM idles near 1).")
    L += ["", f"Command: `CHARGPT_STEPS={steps} CHARGPT_ROUNDS={rounds} /usr/bin/python3 "
          f"bench/run_chargpt.py build/rel-f32` (`make bench-torch` runs it; BENCH_CHARGPT=0 skips it).",
          "",
          f"GPT, 4 layers, 4 heads, d_model 128, d_ff 512, context 64, batch 12, vocabulary "
          f"{vocab} (the text's characters and 4 specials), Pre-LN, GELU, learned positions, tied "
          f"output weights, dropout 0: {params:,} parameters. Text: the files of "
          f"/usr/share/common-licenses in name order ({size:,} bytes), the last 10% held out. "
          f"{steps} steps of Adam (0.9, 0.98, eps 1e-9), lr 0.002 warmed up over 100 steps, "
          f"cosine to 0.0001, gradient norm clipped to 1, on both sides.",
          "",
          "qkv: `train --model gpt --data corpus.txt --format text --layers 4 --heads 4 "
          "--d-model 128 --d-ff 512 --context 64 --batch 12 --dropout 0 --threads N`, its own "
          "ms/step line (data, forward, backward, clipping, Adam; evaluation excluded). PyTorch "
          f"{torch_version} (Debian python3-torch): bench/chargpt_torch.py, the minimal GPT "
          "(stacked QKV linear, masked softmax, GELU MLP, Adam) timed the same way. The two do "
          "not share weights or batches (each initialises and samples its own), so their held-out "
          "losses compare over seeds.",
          "",
          "| threads | qkv ms/step | PyTorch ms/step (best setting) | qkv faster by | "
          "held-out loss qkv: mean (per seed) | PyTorch |",
          "|---:|---:|---|---:|---|---|"]
    for t in threads:
        q = min(x["ms_per_step"] for x in side("qkv", t))
        best = min((x for x in side("pytorch") if x["threads"] <= t),
                   key=lambda x: x["ms_per_step"])
        L.append(f"| {t} | {q:.2f} | {best['ms_per_step']:.2f} ({best['threads']} thread"
                 f"{'s' if best['threads'] > 1 else ''}) | {best['ms_per_step'] / q:.2f}x | "
                 f"{fmt_losses(side('qkv', t))} | {fmt_losses(side('pytorch', t))} |")
    L += ["", "Every run:", "", "| round (seed) | threads | side | ms/step | held-out loss | "
          "peak RSS MB |", "|---:|---:|---|---:|---:|---:|"]
    for x in runs:
        rss = f"{x['peak_rss_mb']:.1f}"
        L.append(f"| {x['seed']} | {x['threads']} | {'qkv' if x['side'] == 'qkv' else 'PyTorch'}"
                 f" | {x['ms_per_step']:.2f} | {x['heldout_loss']:.4f} | {rss} |")
    L += ["", "PyTorch's best setting at N threads is its fastest run at N threads or fewer. "
          "Peak RSS: the process's (wait4), PyTorch's with the interpreter.",
          f"<!-- chargpt-{kind}:end -->"]
    write_section(out_path, f"chargpt-{kind}", L)
    print(f"wrote the Character-level GPT section of {out_path}")


if __name__ == "__main__":
    main()
