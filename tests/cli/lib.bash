# Helpers for the program-level tests in tests/cli/*.sh (sourced by them; not a test itself).
# Each script runs with QKV_BIN (built programs) and QKV_TMP (scratch dir).
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
# expect_fail CMD...: the command must exit non-zero; its stderr+stdout go to $QKV_TMP/out.
expect_fail() { if "$@" >"$QKV_TMP/out" 2>&1; then cat "$QKV_TMP/out"; fail "expected failure: $*"; fi; }
# expect_ok CMD...: the command must exit 0; output to $QKV_TMP/out.
expect_ok() { "$@" >"$QKV_TMP/out" 2>&1 || { cat "$QKV_TMP/out"; fail "expected success: $*"; }; }
# expect_out TEXT: the last command's output contains TEXT (fixed string).
expect_out() { grep -qF -- "$1" "$QKV_TMP/out" || { cat "$QKV_TMP/out"; fail "output lacks: $1"; }; }
# check_narrow WHAT: no line of the last output wider than 80 columns.
check_narrow() {
  awk 'length > 80 { bad = 1 } END { exit bad }' "$QKV_TMP/out" || fail "$1 is wider than 80 columns"
}
# check_gaps WHAT: every "max |a - b|" line of the last output (make step's
# and worked_example's) under its bound: the engine (float32) within 1e-6 of
# by hand, by hand within 1e-8 of fin.diff.
check_gaps() {
  local gap
  for gap in $(sed -n 's/.*max |engine - by hand| over all of the above: //p' "$QKV_TMP/out"); do
    awk -v g="$gap" 'BEGIN { exit !(g + 0 < 1e-6) }' || fail "$1: engine and by hand differ by $gap"
  done
  for gap in $(sed -n 's/.*max |by hand - fin.diff| over all of the above: //p' "$QKV_TMP/out"); do
    awk -v g="$gap" 'BEGIN { exit !(g + 0 < 1e-8) }' || fail "$1: by hand and fin.diff differ by $gap"
  done
}
# Absolute paths, so a script may cd into its scratch directory.
QKV_BIN=$(cd "$QKV_BIN" && pwd)
QKV_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TRAIN="$QKV_BIN/train"
# A model small enough that a run takes a second or two, on one thread.
TINY=(--d-model 16 --heads 2 --layers 1 --d-ff 32 --batch 16 --heldout 50 --symbols 6 --min-len 2 --max-len 5
      --threads 1 --eval-every 0 --warmup 1)
