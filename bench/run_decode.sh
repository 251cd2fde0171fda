#!/usr/bin/env bash
# The decoding benchmark: writes the "Decoding" section of BENCHMARKS.md (the
# part between the <!-- decode:begin --> and <!-- decode:end --> markers,
# appended when absent), leaving the rest of the file as it is.
#
#   bash bench/run_decode.sh <build-dir> [--torch]
#
# bench/run.sh calls it last (make bench / make bench-torch). For each source
# length and thread count it runs bench_decode (qkv: cached greedy, uncached
# greedy, beam 4) and, with --torch, bench/bench_decode_torch.py on the same
# weights and sources (PyTorch: the recompute loop and a cached loop), one
# after the other so each ratio is taken on the same machine state. The whole
# set runs BENCH_DECODE_ROUNDS times, interleaved, and every figure is the
# fastest over all rounds (other jobs on a shared machine come in bursts).
#
# Environment:
#   BENCH_DECODE_LENS     source lengths (default "10 32")
#   BENCH_DECODE_THREADS  thread counts (default "1 2")
#   BENCH_DECODE_COUNT    sources per pass (default 1000)
#   BENCH_DECODE_REPEATS  timed passes per mode and round (default 3)
#   BENCH_DECODE_ROUNDS   rounds of the whole set (default 2)
#   BENCH_OUT             report path (default BENCHMARKS.md at the top of the tree)
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: bash bench/run_decode.sh <build-dir> [--torch]" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=$(cd "$1" && pwd)
TORCH=0
[ "${2:-}" = "--torch" ] && TORCH=1
BENCH="$BUILD_DIR/bench_decode"
[ -x "$BENCH" ] || { echo "run_decode.sh: $BENCH not found (build it with make bench)" >&2; exit 1; }
LENS=${BENCH_DECODE_LENS:-10 32}
THREADS=${BENCH_DECODE_THREADS:-1 2}
COUNT=${BENCH_DECODE_COUNT:-1000}
REPEATS=${BENCH_DECODE_REPEATS:-3}
ROUNDS=${BENCH_DECODE_ROUNDS:-2}
OUT=${BENCH_OUT:-$ROOT/BENCHMARKS.md}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
[ "$TORCH" = 1 ] && bash "$ROOT/.ci/deps" python3-torch python3-numpy

WORK=$(mktemp -d "${TMPDIR:-/tmp}/qkv-bench-decode.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
RESULTS="$WORK/results.jsonl"
: > "$RESULTS"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

echo "qkv decoding benchmark: lengths [$LENS], threads [$THREADS], $COUNT sources, $ROUNDS rounds of $REPEATS repeats$([ "$TORCH" = 1 ] && echo ', with PyTorch')"
for round in $(seq 1 "$ROUNDS"); do
for len in $LENS; do
  files=()
  if [ "$round" = 1 ]; then
    files=(--save-init "$WORK/w$len.safetensors" --save-src "$WORK/src$len.safetensors"
           --save-out "$WORK/out$len.safetensors")
  fi
  for t in $THREADS; do
    "$BENCH" --len "$len" --count "$COUNT" --threads "$t" --repeats "$REPEATS" --json "${files[@]}" |
      tee -a "$RESULTS"
    files=()
    if [ "$TORCH" = 1 ]; then
      "$PY" "$ROOT/bench/bench_decode_torch.py" --init "$WORK/w$len.safetensors" \
        --src "$WORK/src$len.safetensors" --out "$WORK/out$len.safetensors" \
        --threads "$t" --repeats "$REPEATS" --json | tee -a "$RESULTS"
    fi
  done
done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# The build folder as a checkout names it (never this machine's absolute path).
CMD="bash bench/run_decode.sh $(realpath -m --relative-to="$PWD" "${1%/}")$([ "$TORCH" = 1 ] && echo ' --torch')"
ENVS=""
for v in BENCH_DECODE_LENS BENCH_DECODE_THREADS BENCH_DECODE_COUNT BENCH_DECODE_REPEATS BENCH_DECODE_ROUNDS; do
  if [ -n "${!v:-}" ]; then ENVS+="$v=\"${!v}\" "; fi
done
export DEC_CMD="$ENVS$CMD" DEC_ROUNDS="$ROUNDS" DEC_REPEATS="$REPEATS" DEC_LOAD_BEFORE="$LOAD_BEFORE" DEC_LOAD_AFTER="$LOAD_AFTER"
export DEC_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
export DEC_COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
# (the report itself, rewritten by this run, does not count as a change)
if [ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -v " $(basename "$OUT")\$" | head -n 1)" ]; then
  DEC_COMMIT+=" (with uncommitted changes)"
fi
"$PY" - "$RESULTS" "$OUT" "$ROOT/bench" <<'PYEOF'
import json, os, sys

runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
out_path, bench_dir = sys.argv[2], sys.argv[3]
E = os.environ


def get(impl, mode, length, threads):
    """The fastest run of (impl, mode, length, threads) over all rounds."""
    rs = [r for r in runs if (r["impl"], r["mode"], r["len"], r["threads"]) == (impl, mode, length, threads)]
    return min(rs, key=lambda r: r["seconds"]) if rs else None


def tps(r):
    return f"{r['tokens_per_s']:,.0f}" if r else "-"


def ratio(a, b):
    return f"**{b['seconds'] / a['seconds']:.2f}x**" if a and b else "-"


torch_on = any(r["impl"] == "torch" for r in runs)
keys = sorted({(r["len"], r["threads"]) for r in runs if r["impl"] == "qkv"})
count = runs[0]["count"] if runs else 0
lines = ["<!-- decode:begin -->", "## Decoding", ""]
w = lines.append
w(f"Greedy decoding of {count} reverse-task sources of length L in batches of 64, every output "
  "fixed at L + 1 tokens (the reversed symbols and <eos>, what a trained model emits; the "
  "decoders run with ignore_eos so every implementation does the same steps). Model: "
  "bench_train's small shape (d_model 128, 4 heads, 2+2 layers, d_ff 512, Post-LN, ReLU, "
  "sinusoidal positions, vocab 13), seeded random weights, the same in qkv and PyTorch "
  "(a safetensors file). tokens/s = generated tokens / wall time of the whole pass "
  f"(encoder included); each figure is the fastest of {E['DEC_ROUNDS']} interleaved rounds of "
  f"{E['DEC_REPEATS']} passes.")
w("")
w("- qkv cached: `greedy_decode` (KV cache, generation/kv_cache.h); uncached: the same with "
  "`use_cache = false` (the decoder reruns over the prefix every step); beam 4: "
  "`beam_search`, beam 4, alpha 0.6, all hypotheses to L + 1 tokens.")
if torch_on:
    w("- PyTorch recompute: the loop users write around nn.TransformerDecoderLayer "
      "(encode once; each step decode the whole prefix with a causal mask, argmax the last "
      "position, append); PyTorch cached: a hand-written cache over the same layers' weights "
      "(bench/bench_decode_torch.py). Both in eval mode under torch.no_grad().")
w(f"- Command: `{E['DEC_CMD']}`  (run last by `make bench` / `make bench-torch`)")
w(f"- Date: {E['DEC_DATE']}; qkv {E['DEC_COMMIT']}; load average (1, 5, 15 min) before "
  f"{E['DEC_LOAD_BEFORE']}, after {E['DEC_LOAD_AFTER']} on {os.cpu_count()} cores")
w("")
head = "| L | threads | qkv cached tok/s | qkv uncached tok/s | cached vs uncached |"
sep = "|---:|---:|---:|---:|---:|"
if torch_on:
    head += (" PyTorch recompute tok/s | PyTorch cached tok/s | qkv cached vs PyTorch recompute |"
             " qkv cached vs PyTorch cached |")
    sep += "---:|---:|---:|---:|"
head += " beam 4 time / greedy time | same tokens |"
sep += "---:|---:|"
w(head)
w(sep)
for (length, t) in keys:
    c, u, b = (get("qkv", m, length, t) for m in ("cached", "uncached", "beam"))
    row = f"| {length} | {t} | {tps(c)} | {tps(u)} | {ratio(c, u)} |"
    same = []
    if u and u.get("same_as_cached", -1) >= 0:
        same.append(f"uncached {100 * u['same_as_cached']:.0f}%")
    if torch_on:
        pr, pc = get("torch", "recompute", length, t), get("torch", "cached", length, t)
        row += f" {tps(pr)} | {tps(pc)} | {ratio(c, pr)} | {ratio(c, pc)} |"
        for name, r in (("PyTorch recompute", pr), ("PyTorch cached", pc)):
            if r and r.get("same_as_qkv", -1) >= 0:
                same.append(f"{name} {100 * r['same_as_qkv']:.0f}%")
    row += f" {b['seconds'] / c['seconds']:.2f} |" if b and c else " - |"
    row += f" {', '.join(same) or '-'} |"
    w(row)
w("")
w("\"X vs Y\" = Y's time / X's time (above 1: X is faster). \"same tokens\": share of sources "
  "whose output equals qkv's cached greedy output token for token. Timings on this shared "
  "machine move with the load shown above; compare figures from the same row.")
w("<!-- decode:end -->")
sys.path.insert(0, bench_dir)
from report_section import write_section
write_section(out_path, "decode", lines)
print(f"wrote the Decoding section of {out_path}")
PYEOF
