#!/usr/bin/env bash
# Runs each test binary, sums the doctest totals each one writes, then runs
# every program-level test script tests/cli/*.sh (each one test case: exit 0
# passes), and ends with the line "N passed, N failed" (test cases). A binary
# that crashes counts as one failed test case on top of what it reported.
#
#   tests/run_all.sh BIN...            (the Makefile passes the two test binaries)
#   QKV_BIN=build/rel-f32              where the scripts find train, step_through, ...
#   QKV_CLI_ONLY=name                  run only tests/cli/name.sh (and no binary)
set -u
totals=$(mktemp)
trap 'rm -f "$totals"' EXIT
status=0
if [ -z "${QKV_CLI_ONLY:-}" ]; then
  for bin in "$@"; do
    echo "== $bin"
    QKV_TOTALS_FILE="$totals" "$bin" --no-version
    rc=$?
    if [ $rc -ne 0 ]; then
      status=1
      if [ $rc -gt 1 ]; then echo "$bin: exited with status $rc (crash)"; echo "0 1" >> "$totals"; fi
    fi
  done
fi

# Program-level tests: each script gets QKV_BIN and a fresh scratch directory
# QKV_TMP (removed afterwards); its output is shown only when it fails.
here=$(cd "$(dirname "$0")" && pwd)
export QKV_BIN="${QKV_BIN:-build/rel-f32}"
scripts=("$here"/cli/*.sh)
[ -n "${QKV_CLI_ONLY:-}" ] && scripts=("$here/cli/$QKV_CLI_ONLY.sh")
if [ -e "${scripts[0]}" ]; then
  echo "== program tests (tests/cli)"
  for s in "${scripts[@]}"; do
    name=$(basename "$s" .sh)
    scratch=$(mktemp -d)
    log="$scratch.log"
    start=$(date +%s)
    if QKV_TMP="$scratch" bash "$s" >"$log" 2>&1; then
      echo "  ok    $name ($(( $(date +%s) - start ))s)"
      echo "1 0" >> "$totals"
    else
      echo "  FAIL  $name ($(( $(date +%s) - start ))s):"
      sed 's/^/        /' "$log" | tail -40
      echo "0 1" >> "$totals"
      status=1
    fi
    rm -rf "$scratch" "$log"
  done
fi

read -r passed failed < <(awk '{p+=$1; f+=$2} END {print p+0, f+0}' "$totals")
[ "$failed" -ne 0 ] && status=1
echo "$passed passed, $failed failed"
exit $status
