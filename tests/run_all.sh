#!/usr/bin/env bash
# Runs each test binary, sums the doctest totals each one writes, and ends with
# the line "N passed, N failed" (test cases). A binary that crashes counts as
# one failed test case on top of what it reported.
set -u
totals=$(mktemp)
trap 'rm -f "$totals"' EXIT
status=0
for bin in "$@"; do
  echo "== $bin"
  QKV_TOTALS_FILE="$totals" "$bin" --no-version
  rc=$?
  if [ $rc -ne 0 ]; then
    status=1
    if [ $rc -gt 1 ]; then echo "$bin: exited with status $rc (crash)"; echo "0 1" >> "$totals"; fi
  fi
done
read -r passed failed < <(awk '{p+=$1; f+=$2} END {print p+0, f+0}' "$totals")
[ "$failed" -ne 0 ] && status=1
echo "$passed passed, $failed failed"
exit $status
