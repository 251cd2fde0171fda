# A run that diverges (exit 3) reruns the failing step in detect-anomaly mode
# from the state before it (Trainer::rerun_diverged_step), names what made
# the non-finite numbers, and writes diverged.html in the run's folder: with
# a learning rate of 1e6 (in one of a few variants, below) the second step's
# attention backward overflows to -inf (the page names it, with its
# operands' statistics and its backward rule); with
# 30 the loss explodes while every number stays finite, and the rerun says
# no op made a NaN or Inf, with the same loss as the step that diverged (the
# same batch, redrawn). The library-API cases (a custom op's log of 0,
# attention overflowing without its scale) are tests/test_diverged_page.cpp.
. "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
run() {  # run LR [FLAGS...]: a tiny run into $QKV_TMP/lrLR that must exit 3
  local lr=$1
  shift
  set +e
  "$TRAIN" --task reverse "${TINY[@]}" --steps 20 --lr "$lr" --clip 0 --schedule constant \
    --no-save --out "$QKV_TMP/lr$lr" "$@" >"$QKV_TMP/out" 2>&1
  local rc=$?
  set -e
  [ "$rc" = 3 ] || { cat "$QKV_TMP/out"; fail "--lr $lr: expected exit 3, got $rc"; }
}
page_has() {  # page_has FILE TEXT
  grep -qF -- "$2" "$1" || { cat "$1"; fail "$1 lacks: $2"; }
}
# At lr 1e6 Adam's first step moves nearly every weight by +-1e6, the sign
# of its gradient; a gradient that is zero but for rounding (the key bias's,
# softmax being blind to a shift) takes a sign from the rounding, which
# differs between instruction sets, and so does whether the second step's
# backward passes float32's largest number. So the run is tried as it is
# (on the AVX-512 machines its attention backward overflows) and then in
# variants (on the AVX2 machines one with unscaled scores does); one of them
# must overflow in multi_head_attention's backward.
found=
for variant in "" "--no-scale" "--d-model 32" "--seed 2" "--seed 3"; do
  # shellcheck disable=SC2086 # a variant is zero, one or two words
  run 1e6 --instruments 5 $variant
  if grep -qF "rerun in detect-anomaly mode (float32): the first op whose gradient was not finite" \
    "$QKV_TMP/out" && grep -qF "backward of multi_head_attention" "$QKV_TMP/out"; then
    found=1
    break
  fi
done
[ -n "$found" ] || { cat "$QKV_TMP/out"; fail "no run at lr 1e6 overflowed in attention's backward"; }
expect_out "which op made it: $QKV_TMP/lr1e6/diverged.html"
p="$QKV_TMP/lr1e6/diverged.html"
page_has "$p" "no float64 finite-difference proof"
page_has "$p" "<b>backward</b> of <b><code>multi_head_attention</code></b>"
# The gradient it was given is finite (no count in red); the one it made
# holds an Inf.
grep -F ">gradient of the output</td>" "$p" | grep -q "'>0</td><td style='[^']*'>0</td><td style='[^']*'>0</td></tr>" ||
  fail "the gradient of the output is not shown finite in $p"
grep -F ">gradient for input " "$p" | grep -qF "color:#b00" || fail "no non-finite gradient row in $p"
# Its inputs by name: the layer's input and its parameters.
page_has "$p" ">input 0, made by "
page_has "$p" ">input 2 (encoder.layers.0.self_attn.w_q.weight)</td>"
page_has "$p" "backward: <code>"
# Its rule's derivation: a link into docs/ beside the build, to a page that exists.
link=$(sed -n "s/.*derived in <a href='file:\/\/\([^'#]*\)[#']*.*/\1/p" "$p")
[ -n "$link" ] && [ -f "$link" ] || fail "the page's docs link '$link' is not a file"
page_has "$QKV_TMP/lr1e6/index.html" "href='diverged.html'"

run 30
expect_out "rerun in detect-anomaly mode (float32): no op made a NaN or Inf"
loss=$(sed -n 's/.*the loss \([^ ]*\) is over.*/\1/p' "$QKV_TMP/out")
[ -n "$loss" ] || { cat "$QKV_TMP/out"; fail "no diverged loss"; }
expect_out "(the loss $loss is finite)"
page_has "$QKV_TMP/lr30/diverged.html" "<b>No op made a NaN or Inf</b>"
page_has "$QKV_TMP/lr30/diverged.html" "the rerun's loss, $loss, is finite"
expect_out "made it explode; the largest, "
page_has "$QKV_TMP/lr30/diverged.html" "<h2>The weights the updates grew furthest</h2>"
