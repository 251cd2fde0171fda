#!/usr/bin/env bash
# Runs the qkv benchmarks and writes BENCHMARKS.md.
#
#   bash bench/run.sh <build-dir> [--torch]      (make bench / make bench-torch)
#
# <build-dir> holds bench_train (the Makefile passes build/rel-f32). For each
# configuration and thread count (1, 2) it runs bench_train once; with --torch
# it also runs bench/bench_torch.py on the same initial weights and token batch
# in four thread settings (1 thread; 2 threads; 2 threads with
# OMP_WAIT_POLICY=PASSIVE; 2 threads with OPENBLAS_NUM_THREADS=1), interleaved
# with the qkv runs so that every ratio is taken on the same machine state.
# Every configuration and thread count is also timed under a competing load
# (bench_train --contend: a spinning process keeps one core busy during the
# timed steps), and with --torch PyTorch too, at 1 thread and at 2 threads.
#
# Environment:
#   BENCH_CONFIGS   configurations to run (default "tiny small gpt chargpt base")
#   BENCH_STEPS     timed steps per run (default 20, the minimum the report
#                   calls a measurement; fewer is for testing the harness)
#   BENCH_THREADS   thread counts for qkv (default "1 2")
#   BENCH_PRECISIONS  qkv's --precision values (default "fp32 bf16" on a CPU with
#                   AVX512-BF16 and a library built for it, else "fp32": bf16 is
#                   emulated elsewhere, slower than fp32, not a setting anyone
#                   would time); with bf16 and --torch, PyTorch also runs under
#                   torch.autocast('cpu', torch.bfloat16) at 1 and 2 threads
#   BENCH_ROUNDS    rounds per configuration (default 5): every run of the
#                   configuration is repeated, interleaved, and each side is
#                   reported by its fastest round (two-thread timings on a
#                   shared machine drift by up to ~30% between runs)
#   BENCH_BASE_ROUNDS  rounds for base, whose round takes ~10 min (default 1)
#   BENCH_CONTEND   1 (default): also the runs under a competing load; 0: not
#   BENCH_CONTEND_ROUNDS  rounds of each configuration that also run under the
#                   load (default 1: the first; PyTorch at 2 threads takes
#                   seconds per step there)
#   BENCH_TORCH_LOADED_LIMIT  seconds after which a PyTorch run under the load
#                   stops timing steps (default 30; at least 3 steps are timed)
#   BENCH_OUT       report path (default BENCHMARKS.md at the top of the tree)
#   BENCH_DECODE    0: do not retake the decoding section (bench/run_decode.sh)
#   BENCH_MPI       0: do not retake the data-parallel section (bench/run_mpi.sh)
#   BENCH_LONG      0: do not retake the long-sequence section (bench/run_long.sh)
#   BENCH_CHARGPT   0: do not retake the character-level GPT section (with --torch
#                   only: bench/run_chargpt.py trains qkv and PyTorch on a text)
#   BENCH_RECOMPUTE 0: do not retake the recompute section (bench/run_recompute.sh:
#                   small and base, those of them in BENCH_CONFIGS, at 1 and 2
#                   threads with --recompute none, ffn and layer, 3 interleaved
#                   rounds, ~25 min with base; its own BENCH_RECOMPUTE_* settings
#                   are in its header)
#   BENCH_MPI_BUILD the MPI build's directory (make bench passes build/rel-mpi-f32)
#   BENCH_RESULTS   a JSONL file to append every run to, and to report from
#                   with the runs already in it (e.g. base run earlier on its
#                   own); default: a temporary file, this run's runs only
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: bash bench/run.sh <build-dir> [--torch]" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=$(cd "$1" && pwd)
TORCH=0
[ "${2:-}" = "--torch" ] && TORCH=1
BENCH="$BUILD_DIR/bench_train"
# make builds only inside the tree: name the target relative to it.
rel=${BENCH#"$ROOT"/}; [ "$rel" = "$BENCH" ] && rel=build/rel-f32/bench_train
[ -x "$BENCH" ] || { echo "run.sh: $BENCH not found (build it with make -C $ROOT $rel)" >&2; exit 1; }
# The machine the tables are filed under (bench/machine.sh): before any run,
# so that a build of unknown instruction set stops here, not after an hour.
source "$ROOT/bench/machine.sh"
bench_machine "$BUILD_DIR" || exit 1
export BENCH_ISA
if [ "$ISA_KIND" = avx512 ] && [ "$cpu_bf16" -gt 0 ]; then
  PRECISIONS=${BENCH_PRECISIONS:-fp32 bf16}
else
  PRECISIONS=${BENCH_PRECISIONS:-fp32}
fi
for p in $PRECISIONS; do
  case $p in fp32 | bf16) ;; *) echo "run.sh: BENCH_PRECISIONS: '$p' is not fp32 or bf16" >&2; exit 2 ;; esac
done

CONFIGS=${BENCH_CONFIGS:-tiny small gpt chargpt base}
STEPS=${BENCH_STEPS:-20}
THREADS=${BENCH_THREADS:-1 2}
ROUNDS=${BENCH_ROUNDS:-5}
BASE_ROUNDS=${BENCH_BASE_ROUNDS:-1}
CONTEND=${BENCH_CONTEND:-1}
TORCH_LOADED_LIMIT=${BENCH_TORCH_LOADED_LIMIT:-30}
CONTEND_ROUNDS=${BENCH_CONTEND_ROUNDS:-1}
ROUND=1
OUT=${BENCH_OUT:-$ROOT/BENCHMARKS.md}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

if [ "$TORCH" = 1 ]; then
  # PyTorch is Debian's python3-torch, installed on demand.
  bash "$ROOT/.ci/deps" python3-torch python3-numpy
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/qkv-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# The report as it was, for the sections this run does not retake (see the end).
if [ -f "$OUT" ]; then cp "$OUT" "$WORK/old_report.md"; else : > "$WORK/old_report.md"; fi
if [ -n "${BENCH_RESULTS:-}" ]; then
  touch "$BENCH_RESULTS"
  RESULTS=$(cd "$(dirname "$BENCH_RESULTS")" && pwd)/$(basename "$BENCH_RESULTS")
else
  RESULTS="$WORK/results.jsonl"
  : > "$RESULTS"
fi

# One run: appends its JSON line to RESULTS and prints a one-line summary.
record() {
  local line
  line=$("$@") || { echo "run.sh: failed: $*" >&2; exit 1; }
  line=$(printf '%s\n' "$line" | tail -n 1)
  printf '%s\n' "$line" | ROUND=$ROUND "$PY" -c '
import json, os, sys, time
r = json.loads(sys.stdin.read())
r["round"] = int(os.environ["ROUND"])
r["date"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
with open(sys.argv[1], "a") as fh:
    fh.write(json.dumps(r) + "\n")
extra = ""
if r["impl"] == "qkv":
    extra = ", %.1f GFLOP/s = %.0f%% of sgemm ceiling, tensor allocs/step %g, heap blocks/step %.0f" % (
        r["gflops"], 100 * r["ceiling_frac"], r["allocs_per_step"], r["heap_allocs_per_step"])
setting = r.get("setting", "%d thread(s)" % r["threads"])
if r["impl"] == "qkv" and r.get("precision", "fp32") != "fp32":
    setting += ", " + r["precision"]
if r.get("contend") and r["impl"] == "qkv":
    setting += ", one core busy"
print("  %d %-5s %-5s %-38s step %9.2f ms  forward %8.2f ms  RSS %6.1f MB%s" % (
    r["round"], r["impl"], r["config"], setting, r["step_ms"], r["fwd_ms"], r["peak_rss_mb"],
    extra), flush=True)
' "$RESULTS"
}

# One PyTorch run for the current $cfg: run_torch THREADS LABEL [VAR=value...],
# under the competing load when $contend_arg is --contend, under bf16 autocast
# when $autocast_arg is "--autocast bf16".
contend_arg=""
autocast_arg=""
run_torch() {
  local n=$1 label=$2
  shift 2
  record env "$@" "$PY" "$ROOT/bench/bench_torch.py" --config "$cfg" --threads "$n" \
    --setting "$label" --steps "$STEPS" --warmup "$warmup" --init "$init" \
    --batch "$batch" $contend_arg $autocast_arg --json
}

echo "qkv benchmarks: configs [$CONFIGS], $STEPS timed steps, threads [$THREADS], precisions [$PRECISIONS], $ROUNDS round(s) (base $BASE_ROUNDS)$([ "$TORCH" = 1 ] && echo ', with PyTorch')"
echo "  (columns: round, implementation, configuration, setting)"
for cfg in $CONFIGS; do
  warmup=3
  rounds=$ROUNDS
  if [ "$cfg" = base ]; then
    warmup=2  # ~1-3 s per step: the fewest steps the report allows
    rounds=$BASE_ROUNDS
  fi
  init="$WORK/$cfg.safetensors"
  batch="$WORK/$cfg.batch.safetensors"
  first=1
  for ROUND in $(seq 1 "$rounds"); do
    for t in $THREADS; do
      save=()
      if [ $first = 1 ]; then save=(--save-init "$init" --save-batch "$batch"); first=0; fi
      for p in $PRECISIONS; do
        record "$BENCH" --config "$cfg" --threads "$t" --steps "$STEPS" --warmup "$warmup" \
          --precision "$p" "${save[@]}" --json
        save=()
      done
      if [ "$TORCH" = 1 ]; then
        if [ "$t" = 1 ]; then
          run_torch 1 "1 thread"
        else
          run_torch "$t" "$t threads"
          run_torch "$t" "$t threads, OMP_WAIT_POLICY=PASSIVE" OMP_WAIT_POLICY=PASSIVE
          run_torch "$t" "$t threads, OPENBLAS_NUM_THREADS=1" OPENBLAS_NUM_THREADS=1
        fi
        if [[ " $PRECISIONS " == *" bf16 "* ]]; then
          autocast_arg="--autocast bf16"
          run_torch "$t" "$t thread$([ "$t" = 1 ] || echo s), bf16 autocast"
          autocast_arg=""
        fi
      fi
    done
    # The same under a competing load (no sgemm ceiling: it is not the question).
    if [ "$CONTEND" = 1 ] && [ "$ROUND" -le "$CONTEND_ROUNDS" ]; then
      for t in $THREADS; do
        record "$BENCH" --config "$cfg" --threads "$t" --steps "$STEPS" --warmup "$warmup" \
          --contend --no-ceiling --json
        if [ "$TORCH" = 1 ]; then
          # PyTorch at 2 threads takes seconds per step under this load:
          # its timing stops after BENCH_TORCH_LOADED_LIMIT s (at least 3 steps).
          contend_arg="--contend --time-limit $TORCH_LOADED_LIMIT"
          run_torch "$t" "$t thread(s), one core busy"
          contend_arg=""
        fi
      done
    fi
  done
done

# ---- the report ----------------------------------------------------------------
CMD="make bench"
[ "$TORCH" = 1 ] && CMD="make bench-torch"
ENVS=""
for v in BENCH_CONFIGS BENCH_STEPS BENCH_THREADS BENCH_PRECISIONS BENCH_ROUNDS BENCH_BASE_ROUNDS BENCH_CONTEND BENCH_CONTEND_ROUNDS BENCH_TORCH_LOADED_LIMIT BENCH_RESULTS; do
  if [ -n "${!v:-}" ]; then ENVS+="$v=\"${!v}\" "; fi
done
export BENCH_CMD="$ENVS$CMD  (= ${ENVS}bash bench/run.sh $(realpath -m --relative-to="$PWD" "${1%/}")$([ "$TORCH" = 1 ] && echo ' --torch'))"
export BENCH_CPU=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)
export BENCH_NPROC=$(nproc)
export BENCH_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
export BENCH_GXX=$(${CXX:-g++} --version | head -n 1)
export BENCH_BLAS=$(dpkg-query -W -f='${Package} ${Version}' libopenblas0-openmp 2>/dev/null || echo unknown)
export BENCH_KERNEL=$(uname -sr)
# The instruction set measured on (BENCH_ISA, ISA_KIND): bench_machine above.
export BENCH_COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
# (the report itself, rewritten by this run, does not count as a change)
if [ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -v " $(basename "$OUT")\$" | head -n 1)" ]; then
  BENCH_COMMIT+=" (with uncommitted changes)"
fi
export BENCH_STEPS_USED=$STEPS
"$PY" - "$RESULTS" "$WORK/tables.md" <<'PYEOF'
import json, os, sys

all_runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out_path = sys.argv[2]
# Runs under a competing load have their own section; the rest is quiet.
runs = [r for r in all_runs if not r.get("contend")]
loaded = [r for r in all_runs if r.get("contend")]
E = os.environ
# Each (implementation, configuration, threads, setting) is reported by its
# fastest round; every round is listed under "Drift between rounds".
fastest = {}
for r in runs:
    k = (r["impl"], r["config"], r["threads"], r.get("setting", ""), r.get("precision", "fp32"))
    if k not in fastest or r["step_ms"] < fastest[k]["step_ms"]:
        fastest[k] = r
results = list(fastest.values())
rounds_of = {c: max(r["round"] for r in runs if r["config"] == c) for c in {r["config"] for r in runs}}
qkv = [r for r in results if r["impl"] == "qkv"]
torch = [r for r in results if r["impl"] == "torch"]
ORDER = ["tiny", "small", "gpt", "chargpt", "base"]
configs = sorted(dict.fromkeys(r["config"] for r in qkv),
                 key=lambda c: ORDER.index(c) if c in ORDER else len(ORDER))
steps = int(E["BENCH_STEPS_USED"])

SHAPES = {
    "tiny": "encoder-decoder, d_model 64, 4 heads, 2+2 layers, d_ff 256, T = S = 12, batch 64, vocab 16",
    "small": "encoder-decoder, d_model 128, 4 heads, 2+2 layers, d_ff 512, T = S = 32, batch 64, vocab 16",
    "base": "encoder-decoder, d_model 512, 8 heads, 6+6 layers, d_ff 2048, T = S = 32, batch 32, vocab 16",
    "gpt": "decoder-only GPT-2 shape, 2 layers, d_model 128, 4 heads, d_ff 512, T 64, batch 8, vocab 512",
    "chargpt": "character-level GPT, 4 layers, d_model 128, 4 heads, d_ff 512, T 64, batch 12, vocab 87 (trained on a text in the Character-level GPT section)",
}
STYLE = {
    "gpt": "Pre-LN, GELU, learned positions, tied embedding/output weights, biases, dropout 0",
    "chargpt": "Pre-LN, GELU, learned positions, tied embedding/output weights, biases, dropout 0",
}


def torch_candidates(cfg, threads):
    """PyTorch runs that qkv at `threads` threads is compared with: at 1 thread
    the 1-thread run; at 2 threads every setting tried (each uses at most 2)."""
    rs = [r for r in torch if r["config"] == cfg]
    return [r for r in rs if r["threads"] == 1] if threads == 1 else rs


def best(rs, key):
    return min(rs, key=lambda r: r[key]) if rs else None


def prec(r):
    return r.get("precision", "fp32")


def fp32(rs):
    return [r for r in rs if prec(r) == "fp32"]


def qkv_label(r):
    return "fp32" if prec(r) == "fp32" else f"{prec(r)}, {'vdpbf16ps' if r.get('bf16_native') else 'emulated'}"


precisions = sorted({prec(r) for r in results}, key=lambda p: p != "fp32")


def f(x, nd=2):
    return f"{x:,.{nd}f}"


lines = []
w = lines.append
w("# qkv benchmarks")
w("")
w("Training step = zero grads, forward, cross-entropy loss, backward, Adam step; "
  f"the median of {steps} timed steps after warm-up (3 steps; 2 for base). "
  "Forward = forward + loss with no graph (NoGradGuard / torch.no_grad()), median of as many.")
w("")
w("Rounds: " + ", ".join(f"{c} {rounds_of[c]}" for c in configs) + ". Every run of a "
  "configuration (qkv and each PyTorch setting) is repeated in interleaved rounds, and each "
  "one is reported by its fastest round (lowest median step); every round's figures are in "
  "\"Drift between rounds\" below.")
if steps < 20:
    w("")
    w(f"**Test run: {steps} timed steps, fewer than the 20 a measurement needs.**")
w("")
w(f"- Command: `{E['BENCH_CMD']}`")
w(f"- Machine: {E['BENCH_CPU']}, {E['BENCH_NPROC']} cores (nproc), {E['BENCH_KERNEL']}")
w(f"- Instruction set: {E['BENCH_ISA']}")
w(f"- Date: {E['BENCH_DATE']}")
if any("date" in r for r in all_runs):
    spans = []
    for c in configs:
        ds = sorted(r["date"] for r in all_runs if r["config"] == c and "date" in r)
        if ds:
            spans.append(f"{c} {ds[0]} to {ds[-1][-5:]} UTC")
    w("- Runs made: " + "; ".join(spans))
tv = sorted({r["torch_version"] for r in torch})
w(f"- Versions: qkv {E['BENCH_COMMIT']}; {E['BENCH_GXX']}; OpenBLAS {E['BENCH_BLAS']}"
  + (f"; PyTorch {', '.join(tv)} (Debian python3-torch)" if tv else "; PyTorch not run"))
w("")

if torch:
    mixed = "bf16" in precisions
    w("## qkv / PyTorch")
    w("")
    w("Time ratios, qkv ms / PyTorch ms: below 1 means qkv is faster. At 1 thread PyTorch runs "
      "with 1 thread; at 2 threads qkv is compared with the best of PyTorch's settings "
      "(1 thread; 2 threads; 2 threads with OMP_WAIT_POLICY=PASSIVE; 2 threads with "
      "OPENBLAS_NUM_THREADS=1" + ("; bf16 autocast at 1 and at 2 threads" if mixed else "") +
      "), named in the table. Both sides start from the same weights and "
      "token batch (bench_train --save-init/--save-batch) and take the same number of Adam steps, "
      "so their losses agree at the first step and stay close to the last"
      + (" (at the same precision; bf16's rounding moves the last digits)." if mixed else "."))
    if mixed:
        w("")
        w("Each side at its best precision: qkv `--precision fp32` or `bf16` (operands of every "
          "product rounded to bfloat16, float32 sums; docs/precision.md), PyTorch float32 or "
          "`torch.autocast('cpu', dtype=torch.bfloat16)` around forward and loss; the precision "
          "is named in each cell. The float32-only ratio (qkv fp32 against PyTorch's best "
          "float32 setting) is the last column.")
    w("")
    w("| config | threads | qkv step ms (precision) | PyTorch step ms (best setting) | step ratio | "
      "qkv fwd ms | PyTorch fwd ms | fwd ratio | loss first -> last, qkv / PyTorch"
      + (" | float32 only: qkv / PyTorch step |" if mixed else " |"))
    w("|---|---:|---:|---|---:|---:|---:|---:|---|" + ("---:|" if mixed else ""))
    for cfg in configs:
        for t in sorted({r["threads"] for r in qkv if r["config"] == cfg}):
            qs = [r for r in qkv if r["config"] == cfg and r["threads"] == t]
            cands = torch_candidates(cfg, t)
            if not cands:
                continue
            q, qf = best(qs, "step_ms"), best(qs, "fwd_ms")
            bs, bf = best(cands, "step_ms"), best(cands, "fwd_ms")
            row = (f"| {cfg} | {t} | {f(q['step_ms'])} ({qkv_label(q)}) | {f(bs['step_ms'])} "
                   f"({bs['setting']}) | **{q['step_ms'] / bs['step_ms']:.2f}** | {f(qf['fwd_ms'])} | "
                   f"{f(bf['fwd_ms'])} | {qf['fwd_ms'] / bf['fwd_ms']:.2f} | "
                   f"{q['loss_first']:.4f} -> {q['loss_last']:.4f} / "
                   f"{bs['loss_first']:.4f} -> {bs['loss_last']:.4f} |")
            if mixed:
                q32, t32 = best(fp32(qs), "step_ms"), best(fp32(cands), "step_ms")
                row += f" {q32['step_ms'] / t32['step_ms']:.2f} |" if q32 and t32 else " |"
            w(row)
    w("")

for cfg in configs:
    w(f"## {cfg}")
    w("")
    w(f"{SHAPES.get(cfg, cfg)}; "
      f"{STYLE.get(cfg, 'Post-LN, ReLU, sinusoidal positions, dropout 0')}. "
      f"{next(r['params'] for r in qkv if r['config'] == cfg):,} parameters.")
    w("")
    w("| threads | precision | step ms | forward ms | tokens/s | GFLOP/step | GFLOP/s | "
      "product ceiling GFLOP/s | % of ceiling | peak RSS MB | tensor allocs/step | heap blocks/step |")
    w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for q in sorted([r for r in qkv if r["config"] == cfg],
                    key=lambda r: (r["threads"], precisions.index(prec(r)))):
        w(f"| {q['threads']} | {qkv_label(q)} | {f(q['step_ms'])} | {f(q['fwd_ms'])} | {f(q['tokens_per_s'], 0)} | "
          f"{q['step_gflop']:.3f} | {f(q['gflops'], 1)} | {f(q['ceiling_gflops'], 1)} | "
          f"{100 * q['ceiling_frac']:.0f}% | {f(q['peak_rss_mb'], 1)} | {q['allocs_per_step']:g} | "
          f"{q['heap_allocs_per_step']:.0f} |")
    rs = [r for r in torch if r["config"] == cfg]
    if rs:
        w("")
        w("PyTorch, same weights and batch:")
        w("")
        w("| setting | step ms | forward ms | tokens/s | peak RSS MB |")
        w("|---|---:|---:|---:|---:|")
        for r in rs:
            w(f"| {r['setting']} | {f(r['step_ms'])} | {f(r['fwd_ms'])} | "
              f"{f(r['tokens_per_s'], 0)} | {f(r['peak_rss_mb'], 1)} |")
    if cfg == "gpt":
        w("")
        w("For scale: the issue quotes Karpathy's llm.c CPU trainer at about 52 ms/step with "
          "2 threads on this GPT shape. That figure is quoted from the issue, not measured here "
          "(llm.c cannot be fetched on this machine).")
    w("")

if torch:
    w("## Drift between rounds")
    w("")
    w("Every round, with its ratio to the fastest PyTorch setting of the same round: "
      "how far timings on this machine move between runs of the same code.")
    w("")
    w("| config | threads | round | qkv step ms | PyTorch step ms (best setting of the round) | ratio |")
    w("|---|---:|---:|---:|---|---:|")
    for cfg in configs:
        for t in sorted({r["threads"] for r in qkv if r["config"] == cfg}):
            for rnd in range(1, rounds_of[cfg] + 1):
                qs = [r for r in runs if r["impl"] == "qkv" and r["config"] == cfg
                      and r["threads"] == t and r["round"] == rnd]
                ts = [r for r in runs if r["impl"] == "torch" and r["config"] == cfg
                      and r["round"] == rnd and (t != 1 or r["threads"] == 1)]
                if not qs or not ts:
                    continue
                q, b = best(qs, "step_ms"), best(ts, "step_ms")
                w(f"| {cfg} | {t} | {rnd} | {f(q['step_ms'])} ({qkv_label(q)}) | {f(b['step_ms'])} ({b['setting']}) | "
                  f"{q['step_ms'] / b['step_ms']:.2f} |")
    w("")

if loaded:
    def fastest_of(rs):
        out = {}
        for r in rs:
            k = (r["impl"], r["config"], r["threads"])
            if k not in out or r["step_ms"] < out[k]["step_ms"]:
                out[k] = r
        return out

    lq = fastest_of(loaded)
    cpu = next((r["contend_cpu"] for r in loaded if r.get("contend_cpu", -1) >= 0), "?")
    w("## Under a competing load")
    w("")
    w("The same runs with one core kept busy by another process: bench_train --contend "
      f"(and bench_torch.py --contend) start a process spinning on CPU {cpu}, pinned there, "
      "before the warm-up steps and kill it after the forward timing. Step ms is the median "
      "step of the fastest round; every round's median is listed. qkv runs its default "
      "adaptive threading (core/parallel.h: a team that waits longer than it works is "
      "benched and retried later; the regions column counts a step's parallel regions run on "
      "the team and run in turn while it was benched); PyTorch runs with torch.set_num_threads as given, and "
      "stops timing after BENCH_TORCH_LOADED_LIMIT seconds (the steps it took are shown "
      "when fewer).")
    w("")
    w("| config | threads | qkv quiet ms | qkv loaded ms | loaded / quiet | "
      "loaded, 2 threads / 1 thread | regions per step: team / in turn | PyTorch loaded ms | "
      "qkv / PyTorch, loaded | qkv loaded, every round |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for cfg in configs:
        for t in sorted({r["threads"] for r in loaded if r["config"] == cfg and r["impl"] == "qkv"}):
            q = lq.get(("qkv", cfg, t))
            quiet = fastest.get(("qkv", cfg, t, "", "fp32"))
            tt = lq.get(("torch", cfg, t))
            one = lq.get(("qkv", cfg, 1))
            vs1 = f"{q['step_ms'] / one['step_ms']:.2f}" if t != 1 and one else ""
            rounds = ", ".join(f(r["step_ms"]) for r in sorted(
                (r for r in loaded if r["impl"] == "qkv" and r["config"] == cfg and r["threads"] == t),
                key=lambda r: r["round"]))
            tsteps = f" ({tt['steps']} steps)" if tt and tt["steps"] < steps else ""
            vs_torch = f"{q['step_ms'] / tt['step_ms']:.2f}" if tt else ""
            regions = (f"{q['team_regions_per_step']:.0f} / {q['benched_regions_per_step']:.0f}"
                       if t != 1 and "team_regions_per_step" in q else "")
            w(f"| {cfg} | {t} | {f(quiet['step_ms']) if quiet else ''} | {f(q['step_ms'])} | "
              f"{q['step_ms'] / quiet['step_ms']:.2f} | {vs1} | {regions} | "
              f"{f(tt['step_ms']) + tsteps if tt else ''} | "
              f"{vs_torch} | {rounds} |")
    w("")
    if any(r["impl"] == "torch" for r in loaded):
        w("PyTorch under the load, every round's median step ms: " + "; ".join(
            f"{cfg} {t} thread(s): " + ", ".join(f(r["step_ms"]) for r in sorted(
                (r for r in loaded if r["impl"] == "torch" and r["config"] == cfg and r["threads"] == t),
                key=lambda r: r["round"]))
            for cfg in configs for t in sorted({r["threads"] for r in loaded
                                                if r["config"] == cfg and r["impl"] == "torch"})) + ".")
        w("")

w("## How the numbers are made")
w("")
w("- bench/bench_train.cpp, one process per configuration and thread count "
  "(`bench_train --config NAME --threads N --steps S --warmup W --json`); "
  "bench/bench_torch.py likewise for PyTorch, with the environment of its setting.")
w("- tokens/s = B * T target tokens (the ones that carry a loss) / step time.")
w("- GFLOP/step counts the matmul FLOPs of one training step (2*M*N*K per product, "
  "read from qkv's gemm counter); GFLOP/s divides it by the step time.")
w("- sgemm ceiling: every distinct (transA, transB, M, N, K) product of the step "
  "(projections, FFN, output layer, per-head attention products batched over B*H, and "
  "their backward products) is timed alone with qkv::gemm / gemm_batched at the same "
  "thread count, best of several repetitions with the operands in cache; the ceiling is "
  "the step's FLOPs over the sum of those ideal times. % of ceiling = GFLOP/s / ceiling.")
w("- tensor allocs/step: system allocations of qkv's tensor allocator (cache misses) "
  "during the timed steps, per step; 0 means every tensor buffer of a step is reused "
  "from earlier steps.")
w("- heap blocks/step: C++ operator new calls per timed step, counted by bench_train. "
  "The define-by-run graph is built anew every step (nodes, variable handles, tensor "
  "headers, the backward pass's bookkeeping), but from a pool of blocks (core/pool.h) "
  "that earlier steps filled, so 0 means a step asked the system for no memory at all.")
w("- peak RSS: VmHWM (qkv) and ru_maxrss (PyTorch) of the process, i.e. of one "
  "configuration; the PyTorch figure includes the Python interpreter and libtorch.")
w("- Two-thread timings on a shared 2-core machine drift between runs; compare numbers "
  "from the same run.")
w("")

text = "\n".join(lines)
with open(out_path, "w") as fh:
    fh.write(text)
print()
if torch:
    print("qkv / PyTorch step-time ratios, each at its best (below 1: qkv faster):")
    for cfg in configs:
        for t in sorted({r["threads"] for r in qkv if r["config"] == cfg}):
            q = best([r for r in qkv if r["config"] == cfg and r["threads"] == t], "step_ms")
            cands = torch_candidates(cfg, t)
            if cands:
                bs = best(cands, "step_ms")
                print(f"  {cfg:5s} {t} thread(s): {q['step_ms']:9.2f} ms ({prec(q)}) / "
                      f"{bs['step_ms']:9.2f} ms ({bs['setting']}) = {q['step_ms'] / bs['step_ms']:.2f}")
warn = False
for q in qkv:
    if q["allocs_per_step"] != 0:
        print(f"warning: {q['config']} at {q['threads']} thread(s) allocated "
              f"{q['allocs_timed']} blocks in {q['steps']} timed steps", file=sys.stderr)
    if q["ceiling_frac"] > 1:
        print(f"warning: {q['config']} at {q['threads']} thread(s) ran above its sgemm ceiling "
              f"({100 * q['ceiling_frac']:.0f}%): the machine was busy while the ceiling was "
              "measured; rerun on a quiet machine", file=sys.stderr)
    if q.get("flop_mismatch", 0) > 0.03:
        print(f"warning: {q['config']}: the ceiling's shape list misses "
              f"{100 * q['flop_mismatch']:.1f}% of the step's FLOPs", file=sys.stderr)
for cfg in configs:
    q0 = next(r for r in qkv if r["config"] == cfg and prec(r) == "fp32")
    for t in [r for r in torch if r["config"] == cfg and prec(r) == "fp32"]:
        if abs(q0["loss_first"] - t["loss_first"]) > 1e-4 * max(1.0, abs(t["loss_first"])):
            print(f"warning: {cfg}: first-step loss qkv {q0['loss_first']:.6f} vs PyTorch "
                  f"({t['setting']}) {t['loss_first']:.6f}: not the same start", file=sys.stderr)
PYEOF
# ==== one set of tables per instruction set ========================================
# The tables just written are this machine's kind's: AVX-512, AVX2, or AVX2
# emulated on an AVX-512 machine (a library built for AVX2 there, e.g. with
# -march=x86-64-v3, or OpenBLAS told OPENBLAS_CORETYPE=Zen): ISA_KIND, set by
# bench_machine at the start. Each kind has its own marked block
# (<!-- steps-KIND:begin/end -->); the other kinds' blocks are carried over
# from the report as it was, so a run on one kind never drops the other's
# figures.
"$PY" - "$WORK/tables.md" "$WORK/old_report.md" "$OUT" "$ISA_KIND" <<'PYEOF'
import re, sys
tables_path, old_path, out_path, kind = sys.argv[1:5]
KINDS = [("avx512", "AVX-512 machines"), ("avx2", "AVX2-only machines"),
         ("avx2-emulated", "AVX2 emulated on an AVX-512 machine (for A/B comparisons only)")]
old = open(old_path).read()
blocks = {}
for k, _ in KINDS:
    m = re.search(rf"<!-- steps-{k}:begin -->.*?<!-- steps-{k}:end -->", old, re.S)
    if m:
        blocks[k] = m.group(0)
title = dict(KINDS)[kind]
body = []
for i, line in enumerate(open(tables_path).read().rstrip("\n").split("\n")):
    if i == 0:  # "# qkv benchmarks"
        body.append(f"## Training steps on {title}")
    else:
        body.append("#" + line if line.startswith("## ") else line)
blocks[kind] = "\n".join([f"<!-- steps-{kind}:begin -->", *body, f"<!-- steps-{kind}:end -->"])
out = ["# qkv benchmarks", "",
       "One set of training-step tables per instruction set, each from runs on a machine of "
       "that kind (`make bench-torch` writes the block of the machine it runs on and keeps the "
       "others): " + ", ".join(f"[{t}](#training-steps-on-{t.lower().replace(' ', '-')})"
                              for k, t in KINDS if k in blocks and k != "avx2-emulated") + "."]
for k, _ in KINDS:
    if k in blocks:
        out += ["", blocks[k]]
open(out_path, "w").write("\n".join(out) + "\n")
print(f"wrote the {title} tables into {out_path}")
PYEOF
# The hand-written sections (bench/PROFILE.md: the profile, and the before/after
# comparisons and one-off measurements each change recorded) follow the tables;
# a change that measures something by hand adds its section there, so that no
# run of this script drops it.
if [ -f "$ROOT/bench/PROFILE.md" ]; then cat "$ROOT/bench/PROFILE.md" >> "$OUT"; fi

# ==== decoding and data-parallel benchmarks ========================================
# bench/run_decode.sh writes the "Decoding" section (between <!-- decode:begin/end
# --> markers) and bench/run_mpi.sh the "Data parallel over MPI" one (<!--
# mpi:begin/end -->), each into the report just written. BENCH_DECODE=0 or
# BENCH_MPI=0 skips one; a section not retaken is carried over from the report
# as it was before this run, so no figures are lost.
carry_over() {  # carry_over <name>: the old report's <name> section, re-appended
  local block
  block=$(sed -n "/<!-- $1:begin -->/,/<!-- $1:end -->/p" "$WORK/old_report.md")
  [ -n "$block" ] && printf '\n%s\n' "$block" >> "$OUT"
  return 0
}
STATUS=0
if [ "${BENCH_DECODE:-1}" = 0 ]; then
  carry_over decode
elif ! BENCH_OUT="$OUT" bash "$ROOT/bench/run_decode.sh" "$BUILD_DIR" $([ "$TORCH" = 1 ] && echo --torch); then
  echo "run.sh: the decoding benchmark failed; its section is carried over from the old report" >&2
  carry_over decode
  STATUS=1
fi
MPI_BUILD=${BENCH_MPI_BUILD:-}
if [ "${BENCH_MPI:-1}" = 0 ]; then
  carry_over mpi
elif [ -z "$MPI_BUILD" ] || [ ! -x "$MPI_BUILD/train" ] || ! mpirun --version 2>&1 | grep -q "Open MPI"; then
  echo "run.sh: no Open MPI mpirun or MPI trainer (BENCH_MPI_BUILD=$MPI_BUILD): the MPI section is carried over"
  carry_over mpi
elif ! BENCH_OUT="$OUT" bash "$ROOT/bench/run_mpi.sh" "$BUILD_DIR" "$MPI_BUILD"; then
  echo "run.sh: the MPI benchmark failed; its section is carried over from the old report" >&2
  carry_over mpi
  STATUS=1
fi
if [ "${BENCH_LONG:-1}" = 0 ]; then
  carry_over long
elif ! BENCH_OUT="$OUT" bash "$ROOT/bench/run_long.sh" "$BUILD_DIR"; then
  echo "run.sh: the long-sequence benchmark failed; its section is carried over from the old report" >&2
  carry_over long
  STATUS=1
fi
# The character-level GPT has a section per instruction set, as the training
# steps do: the other kinds' sections are always carried over.
for kind in avx512 avx2 avx2-emulated; do
  [ "$kind" = "$ISA_KIND" ] || carry_over "chargpt-$kind"
done
if [ "${BENCH_CHARGPT:-1}" = 0 ] || [ "$TORCH" = 0 ]; then
  carry_over "chargpt-$ISA_KIND"
elif ! BENCH_OUT="$OUT" "$PY" "$ROOT/bench/run_chargpt.py" "$BUILD_DIR"; then
  echo "run.sh: the character-level GPT benchmark failed; its section is carried over" >&2
  carry_over "chargpt-$ISA_KIND"
  STATUS=1
fi
# Recompute is measured at small and base, those of them this run times
# (BENCH_RECOMPUTE_CONFIGS overrides); with neither, the section is carried over.
RECOMPUTE_CONFIGS=${BENCH_RECOMPUTE_CONFIGS:-$(for c in $CONFIGS; do case $c in small|base) printf '%s ' "$c" ;; esac; done)}
if [ "${BENCH_RECOMPUTE:-1}" = 0 ] || [ -z "${RECOMPUTE_CONFIGS// /}" ]; then
  carry_over recompute
elif ! BENCH_RECOMPUTE_CONFIGS="$RECOMPUTE_CONFIGS" BENCH_OUT="$OUT" \
    bash "$ROOT/bench/run_recompute.sh" "$BUILD_DIR"; then
  echo "run.sh: the recompute benchmark failed; its section is carried over from the old report" >&2
  carry_over recompute
  STATUS=1
fi
# ==== end of the decoding, data-parallel, long-sequence, char-GPT and recompute benchmarks =====
# Any other marked section of the old report (written by its own script: the
# BPE tokenizer's, bf16-seeds from bench/bf16_seeds.py, ...) is carried over.
for name in $(sed -n 's/^<!-- \([a-z0-9-]*\):begin -->$/\1/p' "$WORK/old_report.md"); do
  grep -qxF "<!-- $name:begin -->" "$OUT" || carry_over "$name"
done
exit "$STATUS"
