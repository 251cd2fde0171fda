# No library file over 550 lines (CONTRIBUTING.md: one idea per file, ~500
# lines): a file past it is split by topic, as trainer/run.cpp was into
# open_run.cpp, run_options.cpp and csv_log.cpp. Every folder of the Makefile's
# LAYERS is read, each .h and .cpp; the message names each file and its count.
source "$(dirname "$0")/lib.bash"
cd "$QKV_SRC"
read -r -a layers <<< "$(sed -n 's/^LAYERS *:= *//p' Makefile)"
[ "${#layers[@]}" -ge 5 ] || fail "no LAYERS line in the Makefile"
limit=550
# over_limit DIR...: "FILE: N lines" for each .h and .cpp of the folders past the limit.
over_limit() {
  local dir f n
  for dir in "$@"; do
    for f in "$dir"/*.h "$dir"/*.cpp; do
      [ -e "$f" ] || continue
      n=$(wc -l < "$f")
      [ "$n" -le "$limit" ] || echo "$f: $n lines"
    done
  done
}
over=$(over_limit "${layers[@]}")
[ -z "$over" ] || fail "library files over $limit lines (split them by topic): $over"
# The guard can fail: a file one line past the limit is named, one at it is not.
mkdir -p "$QKV_TMP/probe"
awk -v n=$((limit + 1)) 'BEGIN { for (i = 0; i < n; ++i) print "// a line" }' > "$QKV_TMP/probe/long.cpp"
awk -v n=$limit 'BEGIN { for (i = 0; i < n; ++i) print "// a line" }' > "$QKV_TMP/probe/at.h"
[ "$(over_limit "$QKV_TMP/probe")" = "$QKV_TMP/probe/long.cpp: $((limit + 1)) lines" ] ||
  fail "the guard did not name exactly the probe file past the limit: $(over_limit "$QKV_TMP/probe")"
