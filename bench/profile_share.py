#!/usr/bin/env python3
"""Where a training step's time goes: the matrix products against the rest.

  /usr/bin/python3 bench/profile_share.py build/rel-f32 [tiny small gpt chargpt ...]
      [--threads 1] [--steps 40]

For each configuration it runs `bench_train --config C --threads N --steps S
--no-ceiling --no-forward` (training steps only, after its warm-up ones) under `perf record -e cpu-clock` (these VMs have no hardware
counters; cpu-clock samples the running threads at 4 kHz) and sorts the
samples into
  products   OpenBLAS (its kernels, packing and C's scaling), the code
             libxsmm generates at run time (no symbol: perf's [unknown] or
             [JIT]), libxsmm itself (dispatch, the B^T copies), qkv::gemm
             (the dispatch and, for a small product with alpha != 1, the
             scaling of its result into C) and memset (C zeroed before a
             beta = 0 product, the only large memset of a step)
  waiting    libgomp (OpenMP threads at a barrier or asleep)
  the rest   everything else: qkv's own loops (bias rows, softmax, LayerNorm,
             GELU, Adam, ...), named by their largest symbols
and prints one markdown row per configuration. Issue 27 asks that at one
thread the rest be at most 10% of the step. Needs Debian's linux-perf.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

PRODUCT_DSO = re.compile(r"openblas|libxsmm|\[unknown\]|\[JIT\]|perf-\d+\.map", re.I)


def classify(dso, sym):
    if (PRODUCT_DSO.search(dso) or sym.startswith("libxsmm") or "memset" in sym
            or sym.startswith("qkv::gemm")):
        return "products"
    if "libgomp" in dso:
        return "waiting"
    return "rest"


def short(sym):
    """A C++ symbol without its namespaces' noise and argument list."""
    sym = sym.replace("(anonymous namespace)::", "")
    sym = re.sub(r"\(.*", "", sym)
    sym = re.sub(r"\[clone [^]]*\]", "", sym).strip()
    return sym.replace("qkv::", "") or "?"


def profile(build, config, threads, steps):
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "4000", "-o", data, "--",
               os.path.join(build, "bench_train"), "--config", config, "--threads",
               str(threads), "--steps", str(steps), "--no-ceiling", "--no-forward"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                              "--sort", "dso,sym", "-q", "--percent-limit", "0"],
                             check=True, capture_output=True, text=True).stdout
    shares = collections.Counter()
    rest = collections.Counter()
    for line in rep.splitlines():
        if not re.match(r"\s*[\d.]+%", line):
            continue
        # "  6.33%  [JIT] tid 19244  [.] 0x7f4b..." : the dso may hold spaces
        m = re.match(r"\s*([\d.]+)%\s+(.+?)\s+\[[.kgu]\]\s+(.*)", line)
        if not m:
            sys.exit(f"profile_share.py: cannot read perf's line: {line.strip()}")
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(3).strip()
        if dso.startswith("[kernel"):
            sym = "the kernel (page faults, scheduling)"
        kind = classify(dso, sym)
        shares[kind] += pct
        if kind == "rest":
            rest[short(sym)] += pct
    return shares, rest


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    build, configs, threads, steps = args[0], [], 1, 40
    i = 1
    while i < len(args):
        if args[i] == "--threads":
            threads, i = int(args[i + 1]), i + 2
        elif args[i] == "--steps":
            steps, i = int(args[i + 1]), i + 2
        else:
            configs.append(args[i])
            i += 1
    configs = configs or ["tiny", "small", "gpt", "chargpt"]
    print(f"| config | products | waiting | the rest | largest of the rest |")
    print("|---|---:|---:|---:|---|")
    for c in configs:
        shares, rest = profile(build, c, threads, steps)
        total = sum(shares.values()) or 1.0
        top = ", ".join(f"{s} {100 * p / total:.1f}%" for s, p in rest.most_common(6))
        print(f"| {c} | {100 * shares['products'] / total:.0f}% | "
              f"{100 * shares['waiting'] / total:.0f}% | {100 * shares['rest'] / total:.0f}% | "
              f"{top} |", flush=True)


if __name__ == "__main__":
    main()
