#!/usr/bin/env bash
# Every ```cpp block of README.md is a complete program: this extracts each
# one, compiles it against the built library with the flags of the in-tree
# pkg-config file ($QKV_BIN/pkgconfig/qkv.pc, written by `make`; the same
# template as the installed one), runs it and requires exit status 0 and some
# output. A README edit that breaks a snippet fails `make test`.
source "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "$root" && cd "$QKV_BIN" && pwd)
pc="$bin/pkgconfig"
[ -f "$pc/qkv.pc" ] || fail "$pc/qkv.pc is missing (make writes it)"
[ -f "$bin/libqkv.a" ] || fail "$bin/libqkv.a is missing"
flags=$(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs qkv) || fail "pkg-config does not know qkv"

# Split the README's ```cpp blocks into snippet_1.cpp, snippet_2.cpp, ...,
# each headed by a #line so compiler errors point into README.md.
awk -v dir="$QKV_TMP" '
  /^```cpp[ \t]*$/ { n++; file = sprintf("%s/snippet_%d.cpp", dir, n); inside = 1
                     printf "#line %d \"README.md\"\n", NR + 1 > file; next }
  inside && /^```[ \t]*$/ { inside = 0; close(file); next }
  inside { print > file }
  END { if (inside) { print "README.md: unterminated ```cpp block" > "/dev/stderr"; exit 1 } }
' "$root/README.md"
snippets=("$QKV_TMP"/snippet_*.cpp)
[ -e "${snippets[0]}" ] || fail "README.md has no \`\`\`cpp block"
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
  start=$(head -1 "$s" | awk '{print $2}')
  if [ ! -x "${s%.cpp}" ]; then
    echo "$name (README.md line $start) does not compile:"; cat "${s%.cpp}.log"; status=1; continue
  fi
  if ! (cd "$QKV_TMP" && "${s%.cpp}") >"${s%.cpp}.out" 2>&1; then
    echo "$name (README.md line $start) failed:"; cat "${s%.cpp}.out"; status=1; continue
  fi
  [ -s "${s%.cpp}.out" ] || { echo "$name (README.md line $start) printed nothing"; status=1; continue; }
  echo "== $name (README.md line $start):"; head -20 "${s%.cpp}.out"
done
exit $status
