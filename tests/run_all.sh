#!/usr/bin/env bash
# Runs each test binary, sums the doctest totals each one writes, then runs
# every program-level test script tests/cli/*.sh (each one test case: exit 0
# passes), and ends with the line "N passed, N failed" (test cases). A binary
# that crashes counts as one failed test case on top of what it reported.
#
#   tests/run_all.sh BIN...            (the Makefile passes the two test binaries)
#   QKV_BIN=build/rel-f32              where the scripts find train, step_through, ...
#   QKV_CLI_ONLY=name                  run only tests/cli/name.sh (and no binary)
#   QKV_CLI_JOBS=N                     scripts run at a time (default: the cores, at most 4)
set -u
totals=$(mktemp)
trap 'rm -f "$totals"' EXIT  # (and the scripts' results, below)
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
# QKV_TMP (removed afterwards); its output is shown only when it fails. They
# run QKV_CLI_JOBS at a time (default: the cores, at most 4; most use one
# thread), and their lines are printed in the scripts' order as they end. A
# script that begins "# run_all: alone (why)" (after a #! line) runs with no other
# beside it (it times something, or shares files with another script).
here=$(cd "$(dirname "$0")" && pwd)
export QKV_BIN="${QKV_BIN:-build/rel-f32}"
scripts=("$here"/cli/*.sh)
[ -n "${QKV_CLI_ONLY:-}" ] && scripts=("$here/cli/$QKV_CLI_ONLY.sh")
cores=$(nproc 2>/dev/null || echo 1)
jobs_max=${QKV_CLI_JOBS:-$(( cores < 4 ? cores : 4 ))}
case "$jobs_max" in '' | *[!0-9]* | 0) echo "QKV_CLI_JOBS: expected a number >= 1, got '$jobs_max'"; exit 2 ;; esac
results=$(mktemp -d)
trap 'rm -f "$totals"; rm -rf "$results"' EXIT
# run_script I SCRIPT: runs it, leaving results/I.log and results/I.line ("ok"
# or "FAIL", then the seconds); results/I.done last.
run_script() {
  local i=$1 s=$2 scratch start rc
  scratch=$(mktemp -d)
  start=$(date +%s)
  QKV_TMP="$scratch" bash "$s" >"$results/$i.log" 2>&1
  rc=$?
  rm -rf "$scratch"
  if [ $rc -eq 0 ]; then echo "ok $(( $(date +%s) - start ))"; else echo "FAIL $(( $(date +%s) - start ))"; fi >"$results/$i.line"
  touch "$results/$i.done"
}
next=0  # the next script whose line is printed
print_ended() {
  local result secs name
  while [ $next -lt ${#scripts[@]} ] && [ -e "$results/$next.done" ]; do
    read -r result secs <"$results/$next.line"
    name=$(basename "${scripts[$next]}" .sh)
    if [ "$result" = ok ]; then
      echo "  ok    $name (${secs}s)"
      echo "1 0" >> "$totals"
    else
      echo "  FAIL  $name (${secs}s):"
      sed 's/^/        /' "$results/$next.log" | tail -40
      echo "0 1" >> "$totals"
      status=1
    fi
    next=$((next + 1))
  done
}
if [ -e "${scripts[0]}" ]; then
  echo "== program tests (tests/cli)"
  for i in "${!scripts[@]}"; do
    alone=0
    head -2 "${scripts[$i]}" | grep -q '^# run_all: alone' && alone=1
    limit=$jobs_max
    [ $alone = 1 ] && limit=1  # wait until every other script has ended
    while [ "$(jobs -rp | wc -l)" -ge "$limit" ]; do
      wait -n
      print_ended
    done
    if [ $alone = 1 ]; then run_script "$i" "${scripts[$i]}"; else run_script "$i" "${scripts[$i]}" & fi
    print_ended
  done
  wait
  print_ended
  # A script that left no result (its runner killed, the disk full) fails.
  while [ $next -lt ${#scripts[@]} ]; do
    echo "  FAIL  $(basename "${scripts[$next]}" .sh): no result"
    echo "0 1" >> "$totals"
    status=1
    next=$((next + 1))
  done
fi

read -r passed failed < <(awk '{p+=$1; f+=$2} END {print p+0, f+0}' "$totals")
[ "$failed" -ne 0 ] && status=1
echo "$passed passed, $failed failed"
exit $status
