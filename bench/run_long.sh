#!/usr/bin/env bash
# The long-sequence benchmark: writes the "Long sequences" section of
# BENCHMARKS.md (between the <!-- long:begin --> and <!-- long:end -->
# markers, appended when absent), leaving the rest of the file as it is.
#
#   bash bench/run_long.sh <build-dir>
#
# bench/run.sh calls it after the decoding and MPI sections (BENCH_LONG=0
# skips it). It runs bench_long (bench/bench_long.cpp says what it measures)
# at each thread count and records the command, the commit, the date and the
# instruction set with the tables.
#
# Environment:
#   BENCH_LONG_THREADS  thread counts (default "1")
#   BENCH_LONG_ROUNDS   timed rounds per kernel and length (default 5)
#   BENCH_OUT           report path (default BENCHMARKS.md at the top of the tree)
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: bash bench/run_long.sh <build-dir>" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=$(cd "$1" && pwd)
BENCH="$BUILD_DIR/bench_long"
[ -x "$BENCH" ] || { echo "run_long.sh: $BENCH not found (build it with make bench)" >&2; exit 1; }
THREADS=${BENCH_LONG_THREADS:-1}
ROUNDS=${BENCH_LONG_ROUNDS:-5}
OUT=${BENCH_OUT:-$ROOT/BENCHMARKS.md}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

{
  echo "<!-- long:begin -->"
  echo "## Long sequences"
  echo
  echo "Commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)," \
    "$(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')," \
    "$(nproc) cores; \`grep -c avx512f /proc/cpuinfo\` = $(grep -c avx512f /proc/cpuinfo || true)" \
    "($(grep -q avx512f /proc/cpuinfo && echo AVX-512 || echo 'AVX2, no AVX-512'))." \
    "The machine was shared with other jobs while this ran: compare figures within a table," \
    "not across runs."
  for t in $THREADS; do
    echo
    echo "\`$(basename "$BUILD_DIR")/bench_long --threads $t --rounds $ROUNDS\`:"
    echo
    "$BENCH" --threads "$t" --rounds "$ROUNDS"
  done
  echo
  echo "Peak MiB: the most tensor storage held at once during one forward + backward, above the"
  echo "weights and inputs (qkv's allocator counters); RSS: the process's peak resident memory,"
  echo "each in a process of its own. Time ratio: memory-efficient / standard. Recompute: the"
  echo "model's step without the optimizer (forward, cross-entropy, backward), causal; its peak"
  echo "MiB counts everything the step holds at once (activations, gradients), not the weights."
  echo "<!-- long:end -->"
} > "$WORK/section.md"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
"$PY" - "$OUT" "$WORK/section.md" "$ROOT/bench" <<'PYEOF'
import sys
out_path, section_path, bench_dir = sys.argv[1:4]
sys.path.insert(0, bench_dir)
from report_section import write_section
write_section(out_path, "long", open(section_path).read().rstrip("\n").split("\n"))
print(f"wrote the Long sequences section of {out_path}")
PYEOF
