#!/usr/bin/env bash
# Every ```cpp block of README.md and of the pages in docs/ is a complete
# program: this extracts each one, compiles it against the built library with
# the flags of the in-tree pkg-config file ($QKV_BIN/pkgconfig/qkv.pc, written
# by `make`; the same template as the installed one), runs it and requires
# exit status 0 and some output. An edit that breaks a snippet fails
# `make test`. (A fragment that is not a whole program is fenced ```c++ or
# indented, and is not compiled.)
source "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "$root" && cd "$QKV_BIN" && pwd)
pc="$bin/pkgconfig"
[ -f "$pc/qkv.pc" ] || fail "$pc/qkv.pc is missing (make writes it)"
[ -f "$bin/libqkv.a" ] || fail "$bin/libqkv.a is missing"
flags=$(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs qkv) || fail "pkg-config does not know qkv"

# Split each page's ```cpp blocks into <page>_1.cpp, <page>_2.cpp, ... (the
# page's path with / as _, e.g. docs_training_md_1.cpp), each headed by a
# #line so compiler errors point into the page.
cd "$root"
pages=(README.md docs/*.md)
for page in "${pages[@]}"; do
  awk -v dir="$QKV_TMP" -v page="$page" -v stem="$(echo "$page" | tr '/.' '__')" '
    /^```cpp[ \t]*$/ { n++; file = sprintf("%s/%s_%d.cpp", dir, stem, n); inside = 1
                       printf "#line %d \"%s\"\n", NR + 1, page > file; next }
    inside && /^```[ \t]*$/ { inside = 0; close(file); next }
    inside { print > file }
    END { if (inside) exit 1 }
  ' "$page" || fail "$page: unterminated \`\`\`cpp block"
done
ls "$QKV_TMP"/README_md_*.cpp >/dev/null 2>&1 || fail "README.md has no \`\`\`cpp block"
snippets=("$QKV_TMP"/*.cpp)
echo "${#snippets[@]} snippets"

# Compile in parallel (two at a time), then run one by one.
pids=()
for s in "${snippets[@]}"; do
  # shellcheck disable=SC2086  # $flags is a list of flags
  g++ -O1 -Wall -Wextra -Werror=return-type "$s" -o "${s%.cpp}" $flags >"${s%.cpp}.log" 2>&1 &
  pids+=($!)
  if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}" || true; pids=("${pids[@]:1}"); fi
done
wait || true
status=0
for s in "${snippets[@]}"; do
  name=$(basename "$s" .cpp)
  where=$(head -1 "$s" | awk '{gsub(/"/, "", $3); print $3 " line " $2}')
  if [ ! -x "${s%.cpp}" ]; then
    echo "$name ($where) does not compile:"; cat "${s%.cpp}.log"; status=1; continue
  fi
  if ! (cd "$QKV_TMP" && "${s%.cpp}") >"${s%.cpp}.out" 2>&1; then
    echo "$name ($where) failed:"; cat "${s%.cpp}.out"; status=1; continue
  fi
  [ -s "${s%.cpp}.out" ] || { echo "$name ($where) printed nothing"; status=1; continue; }
  echo "== $name ($where):"; head -20 "${s%.cpp}.out"
done
exit $status
