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
