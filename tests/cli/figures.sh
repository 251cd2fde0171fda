# The figures in docs/figures/ are what their scripts in tools/figures/ draw
# now: each script runs again here and its SVG must equal the committed one
# byte for byte (all but variance.py, whose 6 s of sampling is left to be
# run by hand). The experts' routing table routes the tokens that
# `worked_example --page moe` routes: the figure's router logits are the
# program's.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
mkdir -p docs/figures
n=0
for script in "$QKV_SRC"/tools/figures/*.py; do
  name=$(basename "$script")
  case "$name" in svgplot.py | variance.py) continue ;; esac
  out=$(sed -n 's/^OUT = "\(docs\/figures\/[a-z_-]*\.svg\)"$/\1/p' "$script")
  [ -n "$out" ] || fail "$name: no OUT = \"docs/figures/....svg\" line"
  python3 -B "$script" >"$QKV_TMP/log" 2>&1 || { cat "$QKV_TMP/log"; fail "$name failed"; }
  cmp -s "$out" "$QKV_SRC/$out" || fail "$name draws a $out other than the committed one: run python3 tools/figures/$name"
  n=$((n + 1))
done
[ "$n" -ge 10 ] || fail "checked only $n figures"
# The routing table's logits, from the script and from the program.
expect_ok "$QKV_BIN/worked_example" --page moe --no-fd
program=$(sed -n 's/^ *[0-3] *\[ *\([-0-9.]*\) *\([-0-9.]*\) *\([-0-9.]*\)\].*/\1 \2 \3/p' "$QKV_TMP/out")
figure=$(cd "$QKV_SRC/tools/figures" && python3 -B -c 'import moe; print("\n".join(" ".join(f"{v:.1f}" for v in r) for r in moe.LOGITS))')
[ "$(echo "$program" | wc -l)" = 4 ] || fail "worked_example --page moe printed no 4 rows of logits"
[ "$program" = "$figure" ] || fail "the figure's router logits ($figure) are not the program's ($program)"
echo "$n figures as drawn; the routing table's logits are worked_example's"
