# step_through: flags checked before any work (each error naming the flag); part 1
# shown three ways (by hand, engine, finite difference) with the numbers of
# docs/attention-backward.md, part 3 (RMSNorm, RoPE) the same way; --order
# lists the engine's backward op by op.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
expect_fail "$QKV_BIN/step_through" --part 4
expect_out "--part"
expect_fail "$QKV_BIN/step_through" --dot missing/graph.dot
expect_out "--dot missing/graph.dot: the directory missing does not exist"
grep -q "Part 1" "$QKV_TMP/out" && fail "worked before refusing --dot"
mkdir adir
expect_fail "$QKV_BIN/step_through" --dot adir
expect_out "--dot adir: is a directory"
expect_ok "$QKV_BIN/step_through" --part 1 --no-fd
grep -q "fin.diff" "$QKV_TMP/out" && fail "--no-fd still printed finite differences"
# Part 1 prints each gradient three ways, and the largest gaps between them.
# 1a is the worked check of docs/attention-backward.md: its dZ, then 1b's (scaled).
expect_ok "$QKV_BIN/step_through" --part 1
expect_out "1a. Unscaled (scale = 1): docs/attention-backward.md's worked check"
expect_out "by hand  [ 0.3655  0.1345  0.3655  0.1345]"
expect_out "by hand  [-0.4638 -0.0362  0.2672  0.2328]"
expect_out "engine   [-0.4638 -0.0362  0.2672  0.2328]"
expect_out "fin.diff [-0.4638 -0.0362  0.2672  0.2328]"
expect_out "engine   [-0.4455 -0.0545  0.2243  0.2757]"
grep -q "Part 2" "$QKV_TMP/out" && fail "--part 1 printed part 2"
check_gaps "part 1"
[ "$(grep -c 'max |engine - by hand|' "$QKV_TMP/out")" = 2 ] || fail "expected two variants' gaps"
check_narrow "part 1"
# Part 2: LayerNorm and attention by hand against the engine, ~1e-7 relative.
expect_ok "$QKV_BIN/step_through" --part 2
expect_out "dx      by hand vs engine "
# dZ is not the fused op's (kept in scratch) but the head recomposed from
# qkv's ops, and says so.
expect_out "dZ by hand                         dZ recomposed (qkv's softmax op)"
grep -q "from the engine" "$QKV_TMP/out" && fail "a recomposed column is labelled \"from the engine\""
# The untrained loss against ln V: the line says what to expect and why this
# one differs, as a sum that adds up to the loss printed above it.
expect_out "Untrained, a model should score near ln V = ln 8 = 2.0794"
loss=$(sed -n 's/^ loss = cross_entropy(logits (1,4,8), tgt_out) = //p' "$QKV_TMP/out")
read -r total lnv spread chance < <(sed -n \
  's/^ *\([0-9.]*\) = \([0-9.]*\) + \([0-9.]*\) (the spread) *+ \(-\{0,1\}[0-9.]*\) (chance)$/\1 \2 \3 \4/p' "$QKV_TMP/out")
[ -n "${chance:-}" ] || fail "no line splits the loss into ln V + spread + chance"
awk -v l="$loss" -v t="$total" -v v="$lnv" -v s="$spread" -v c="$chance" 'BEGIN {
  d = v + s + c - l; e = t - l
  exit !(l > v && (d < 0 ? -d : d) <= 2e-4 && (e < 0 ? -e : e) <= 1e-4 && (v - log(8)) ^ 2 < 1e-8 && s > 0) }' ||
  fail "loss $loss is not ln V $lnv + spread $spread + chance $chance (total $total)"
check_narrow "part 2"
# Part 3: one RMSNorm row and one RoPE pair, by hand beside the engine and
# finite differences (the numbers of docs/rmsnorm-backward.md and
# docs/rope-backward.md).
expect_ok "$QKV_BIN/step_through" --part 3
expect_out "rrms = 1 / sqrt(7.5) = 0.3651"
expect_out "by hand  [ 0.2313 -0.4503 -0.0365  0.1947]"
expect_out "fin.diff [ 0.2313 -0.4503 -0.0365  0.1947]"
expect_out "(1,2)   [-1.1426  1.9221]   [-1.1426  1.9221]"
check_gaps "part 3"
[ "$(grep -c 'max |engine - by hand|' "$QKV_TMP/out")" = 1 ] || fail "part 3: expected one line of gaps"
grep -q "Part 1\|Part 2" "$QKV_TMP/out" && fail "--part 3 printed another part"
check_narrow "part 3"
expect_ok "$QKV_BIN/step_through" --part 3 --no-fd
grep -q "fin.diff" "$QKV_TMP/out" && fail "--part 3 --no-fd still printed finite differences"
grep -q "backward order" "$QKV_TMP/out" && fail "printed the backward order without --order"
# --order: a numbered list of the ops backward visits, the loss's node first,
# each with its module path.
expect_ok "$QKV_BIN/step_through" --part 1 --no-fd --order
expect_out "The engine's backward order (part 2's model)"
grep -q "Part 2" "$QKV_TMP/out" && fail "--part 1 --order printed part 2"
sed -n 's/^ *\([0-9][0-9]*\)\. .*/\1/p' "$QKV_TMP/out" > steps
[ "$(head -1 steps)" = 1 ] || fail "the list does not start at 1"
[ "$(wc -l < steps)" -ge 10 ] || fail "only $(wc -l < steps) steps listed"
seq 1 "$(wc -l < steps)" | cmp -s - steps ||
  fail "steps are not numbered 1, 2, 3, ...: $(tr '\n' ' ' < steps)"
grep -qE '^ +1\. cross_entropy +\(\) ' "$QKV_TMP/out" ||
  fail "step 1 is not the loss's node (cross_entropy, shape ())"
grep -qE '^ +[0-9]+\. add_layer_norm +\(1,4,8\) +decoder\.layers\.0\.norm3$' "$QKV_TMP/out" ||
  fail "no step names its module path (decoder.layers.0.norm3)"
check_narrow "--order"
