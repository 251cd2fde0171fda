#!/usr/bin/env bash
# The recompute benchmark: writes the "Recompute at small and base" section of
# BENCHMARKS.md (between the <!-- recompute:begin --> and <!-- recompute:end -->
# markers, appended when absent), leaving the rest of the file as it is.
#
#   bash bench/run_recompute.sh <build-dir>
#
# bench/run.sh calls it after the long-sequence section (BENCH_RECOMPUTE=0
# skips it). For each round, configuration and thread count it runs
# bench_train once per setting of --recompute (none, ffn, layer), each in a
# process of its own so that its peak RSS is its own; the rounds are
# interleaved, and every (configuration, threads, setting) is reported by its
# fastest round (lowest median step). bench/bench_train.cpp says what it
# measures: the step time, the saved activations and the peak tensor memory
# of one step (qkv's allocator counters), and the process's peak RSS.
#
# The goal it judges (issue 26): recompute layer keeps at most 40% of the
# saved-activation memory of none (cuts it by at least 60%) for at most 45%
# more step time.
#
# Environment:
#   BENCH_RECOMPUTE_CONFIGS  configurations (default "small base"; bench_train's names)
#   BENCH_RECOMPUTE_THREADS  thread counts (default "1 2")
#   BENCH_RECOMPUTE_ROUNDS   interleaved rounds (default 3)
#   BENCH_STEPS              timed steps per run (default 20; fewer only to test the harness)
#   BENCH_OUT                report path (default BENCHMARKS.md at the top of the tree)
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: bash bench/run_recompute.sh <build-dir>" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=$(cd "$1" && pwd)
BENCH="$BUILD_DIR/bench_train"
[ -x "$BENCH" ] || { echo "run_recompute.sh: $BENCH not found (build it with make bench)" >&2; exit 1; }
CONFIGS=${BENCH_RECOMPUTE_CONFIGS:-small base}
THREADS=${BENCH_RECOMPUTE_THREADS:-1 2}
ROUNDS=${BENCH_RECOMPUTE_ROUNDS:-3}
STEPS=${BENCH_STEPS:-20}
SETTINGS="none ffn layer"
OUT=${BENCH_OUT:-$ROOT/BENCHMARKS.md}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qkv-bench-recompute.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
RESULTS="$WORK/results.jsonl"
: > "$RESULTS"

export RC_COMMAND="BENCH_RECOMPUTE_CONFIGS=\"$CONFIGS\" BENCH_RECOMPUTE_THREADS=\"$THREADS\" BENCH_RECOMPUTE_ROUNDS=$ROUNDS BENCH_STEPS=$STEPS bash bench/run_recompute.sh $(basename "$(dirname "$BUILD_DIR")")/$(basename "$BUILD_DIR")"
export RC_COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
export RC_DIRTY=$([ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] && echo 1 || echo 0)
export RC_CPU=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
export RC_CORES=$(nproc)
export RC_AVX512=$(grep -c avx512f /proc/cpuinfo || true)
export RC_LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
export RC_START=$(date -u '+%Y-%m-%d %H:%M')
export RC_STEPS=$STEPS RC_ROUNDS=$ROUNDS

echo "qkv recompute benchmark: configs [$CONFIGS], threads [$THREADS], settings [$SETTINGS], $ROUNDS round(s) of $STEPS timed steps"
for round in $(seq 1 "$ROUNDS"); do
  for cfg in $CONFIGS; do
    warmup=3
    [ "$cfg" = base ] && warmup=2  # ~1-4 s per step, as bench/run.sh
    for t in $THREADS; do
      for rc in $SETTINGS; do
        "$BENCH" --config "$cfg" --threads "$t" --recompute "$rc" --steps "$STEPS" \
          --warmup "$warmup" --no-ceiling --json |
          "$PY" -c '
import json, sys
r = json.loads(sys.stdin.read())
r["round"], r["warmup"] = int(sys.argv[1]), int(sys.argv[2])
open(sys.argv[3], "a").write(json.dumps(r) + "\n")
print("  round %d %s %d thread(s) %s: %.1f ms, saved %.1f MiB, step peak %.1f MiB, RSS %.1f MiB"
      % (r["round"], r["config"], r["threads"], r["recompute"], r["step_ms"], r["saved_mib"],
         r["step_peak_mib"], r["peak_rss_mb"]))' "$round" "$warmup" "$RESULTS"
      done
    done
  done
done
export RC_END=$(date -u '+%Y-%m-%d %H:%M')
export RC_LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

"$PY" - "$RESULTS" "$OUT" "$ROOT/bench" <<'PYEOF'
import json, os, sys
results_path, out_path, bench_dir = sys.argv[1:4]
sys.path.insert(0, bench_dir)
from report_section import write_section
E = os.environ
runs = [json.loads(l) for l in open(results_path) if l.strip()]
best = {}  # (config, threads, setting) -> the fastest round's run
for r in runs:
    k = (r["config"], r["threads"], r["recompute"])
    if k not in best or r["step_ms"] < best[k]["step_ms"]:
        best[k] = r
order = []
for r in runs:
    k = (r["config"], r["threads"])
    if k not in order:
        order.append(k)

MEM_GOAL, TIME_GOAL = 0.60, 0.45
isa = "AVX-512" if int(E["RC_AVX512"]) > 0 else "AVX2, no AVX-512"
configs = list(dict.fromkeys(cfg for cfg, _ in order))
title = ", ".join(configs[:-1]) + " and " + configs[-1] if len(configs) > 1 else configs[0]
end = E["RC_END"] if E["RC_END"][:10] != E["RC_START"][:10] else E["RC_END"][11:]
lines = ["<!-- recompute:begin -->", f"## Recompute at {title}", ""]
lines.append(
    f"Commit {E['RC_COMMIT']}{' (with uncommitted changes)' if E['RC_DIRTY'] == '1' else ''}, "
    f"runs {E['RC_START']} to {end} UTC, {E['RC_CPU']}, {E['RC_CORES']} cores; "
    f"`grep -c avx512f /proc/cpuinfo` = {E['RC_AVX512']} ({isa}). Load average (1, 5, 15 min) "
    f"{E['RC_LOAD_BEFORE']} before, {E['RC_LOAD_AFTER']} after.")
lines += ["", f"Command: `{E['RC_COMMAND']}`, which runs "
          "`bench_train --config C --threads N --recompute R --steps S --warmup W --no-ceiling "
          "--json` once per configuration, thread count, setting and round, each in a process of "
          f"its own ({E['RC_ROUNDS']} interleaved round(s) of {E['RC_STEPS']} timed steps; warm-up "
          "3 steps, 2 for base). Each row is the setting's fastest round (lowest median step), "
          "with that run's memory figures (the tensor figures are the same in every round)."]
lines += ["",
          "| config | threads | recompute | step ms | saved activations MiB | peak tensor MiB "
          "| peak RSS MiB | activations saved vs none | peak tensor saved vs none "
          "| step time added vs none |",
          "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
verdicts = []
for cfg, t in order:
    none = best.get((cfg, t, "none"))
    for rc in ("none", "ffn", "layer"):
        r = best.get((cfg, t, rc))
        if r is None:
            continue
        if none is not None and rc != "none":
            act = 1 - r["saved_mib"] / none["saved_mib"]
            peak = 1 - r["step_peak_mib"] / none["step_peak_mib"]
            time = r["step_ms"] / none["step_ms"] - 1
            vs = [f"{100 * act:.0f}%", f"{100 * peak:.0f}%", f"{100 * time:+.0f}%"]
        else:
            vs = ["", "", ""]
        lines.append(f"| {cfg} | {t} | {rc} | {r['step_ms']:,.2f} | {r['saved_mib']:,.1f} "
                     f"| {r['step_peak_mib']:,.1f} | {r['peak_rss_mb']:,.1f} | " + " | ".join(vs) + " |")
    layer = best.get((cfg, t, "layer"))
    if none is not None and layer is not None:
        act = 1 - layer["saved_mib"] / none["saved_mib"]
        time = layer["step_ms"] / none["step_ms"] - 1
        ok = act >= MEM_GOAL and time <= TIME_GOAL
        verdicts.append((cfg, t, act, time, ok))
lines += ["",
          "Saved activations: the tensor memory the graph holds at the end of forward + loss, "
          "above what was held before the step (weights, gradients, Adam's moments); peak "
          "tensor: the most held at once during the whole step (forward, loss, backward, Adam), "
          "above the same; both from qkv's allocator counters in one step after the timed ones. "
          "Peak RSS: the process's VmHWM (all of it: weights, the allocator's cached blocks, "
          "code). ffn recomputes each feed-forward network's hidden activations in backward; "
          "layer keeps only each layer's input and recomputes the whole layer."]
if verdicts:
    met = [v for v in verdicts if v[4]]
    detail = "; ".join(f"{c} at {t} thread(s): {100 * a:.0f}% less, {100 * tm:+.0f}% time"
                       f" ({'met' if ok else 'missed'})" for c, t, a, tm, ok in verdicts)
    lines += ["", f"**Goal** (recompute layer cuts saved-activation memory by at least "
              f"{100 * MEM_GOAL:.0f}% for at most {100 * TIME_GOAL:.0f}% more step time): "
              f"{'met' if len(met) == len(verdicts) else 'not met'}: met at {len(met)} of "
              f"{len(verdicts)} (configuration, threads) pairs. {detail}."]
lines.append("<!-- recompute:end -->")
write_section(out_path, "recompute", lines)
print(f"wrote the Recompute section of {out_path}")
PYEOF
