# docs/trace-format.md's Python snippet (standard library only) reads the
# traces of the page step_through --html writes: it runs, prints both
# traces' titles, three backward steps each and "0 fail".
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
awk '/^```python[ \t]*$/ { inside = 1; next } inside && /^```[ \t]*$/ { exit } inside { print }' \
  "$QKV_SRC/docs/trace-format.md" > read_trace.py
[ -s read_trace.py ] || fail "no python block in docs/trace-format.md"
expect_ok "$QKV_BIN/step_through" --html page.html
expect_ok python3 -I read_trace.py page.html
expect_out "Part 1: one query over four keys loss"
expect_out "Part 2: a 1+1-layer Transformer loss"
expect_out "backward of cross_entropy  [] rule: dx = g (p - q) / n_valid"
[ "$(grep -c 'finite-difference checks, 0 fail' "$QKV_TMP/out")" = 2 ] || { cat "$QKV_TMP/out"; fail "finite differences not all passing"; }
