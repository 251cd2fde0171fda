# worked_example: the derivation pages' worked examples. Each page's numbers
# three ways (by hand, engine, finite differences) with the gaps between them
# under their bounds, 80 columns wide; --page picks one, --no-fd drops the
# finite differences, and a page it does not know is refused by name.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
expect_fail "$QKV_BIN/worked_example" --page nope
expect_out "--page"
expect_out "nope"
# Every "max |a - b|" line under its bound (check_gaps, lib.bash), at least
# one such line, and no line past 80 columns.
check_page() {
  check_gaps "$1"
  grep -q 'max |engine - by hand|' "$QKV_TMP/out" || fail "$1: no line of gaps"
  check_narrow "$1"
}
# moe: the routing table, the claim order with token 3's dropped choice,
# and the router logits' gradient.
expect_ok "$QKV_BIN/worked_example" --page moe
expect_out "   3    [  0.2   0.0   1.2]  [ 0.2204  0.1805  0.5991]  2, 0   0.7311 0.2689"
expect_out "   0     tokens 0, 2, 1             tokens 0, 2, 1"
expect_out "Dropped: token 3's choice 2 (expert 0): expert 0 is full."
expect_out "Dropped by the engine: 1 (capacity 3)."
expect_out "fin.diff [-0.1966  0.1966  0.0000]"
[ "$(grep -c '\[-0.5898  0.0000  0.5898\]' "$QKV_TMP/out")" = 3 ] ||
  fail "moe: token 3's dl is not [-0.5898, 0, 0.5898] by hand, engine and fin.diff"
check_page moe
[ "$(grep -c 'max |by hand - fin.diff|' "$QKV_TMP/out")" = 1 ] || fail "moe: expected one fin.diff gap"
expect_ok "$QKV_BIN/worked_example" --page moe --no-fd
grep -q "fin.diff" "$QKV_TMP/out" && fail "--no-fd still printed finite differences"
# relative-bias: the bucket table, library beside by hand, the ladder, and
# the table's gradient; the gradient sums to 0 over the buckets.
expect_ok "$QKV_BIN/worked_example" --page relative-bias
expect_out "     -20       10       10       17       17"
expect_out "      20       26       26        0        0"
expect_out " Library and by hand differ on 0 of them."
expect_out "     8 12 16 23 32 46 64 91"
expect_out "by hand  [ 0.0258  0.0330 -0.0921  0.2808 -0.2800]"
expect_out "sum of dtable = 0.0000"
check_page relative-bias
# swiglu: one row's pieces by hand, y and dx three ways.
expect_ok "$QKV_BIN/worked_example" --page swiglu
expect_out "silu(a) = a sigmoid(a)           [ 0.3112 -0.1423]"
expect_out "du = dh * silu(a)                [ 0.4668  0.1423]"
expect_out "(1,2)   [ 2.0097  1.2320]   [ 2.0097  1.2320]   [ 2.0097  1.2320]"
check_page swiglu
# gqa: a shared head's gradient, the two contributions of its group and their sum.
expect_ok "$QKV_BIN/worked_example" --page gqa
expect_out "   [ 0.5909  0.2046  0.2046]          [ 0.4555  0.2246  0.3199]"
expect_out "(3,2)   [ 0.5872  0.0920]   [ 0.5872  0.0920]   [ 0.5872  0.0920]"
expect_out "(3,2)   [-0.0364  0.3594]   [-0.0364  0.3594]   [-0.0364  0.3594]"
expect_out "(3,2)   [ 0.5507  0.4515]   [ 0.5507  0.4515]   [ 0.5507  0.4515]"
check_page gqa
# bert: the draws of the 80/10/10 rule, library beside by hand, and the
# masked loss's gradient, exactly 0 on the rows not chosen.
expect_ok "$QKV_BIN/worked_example" --page bert
expect_out "    2       4      6   0.8435  5, a random word"
expect_out "   masked, mask_for_mlm      1  4  6  3  5  4  5  2"
expect_out "   targets, mask_for_mlm     0  4  0  5  6  0  0  0"
expect_out " Library and by hand differ on 0 of them"
expect_out "by hand  [ 0.0000  0.0000  0.0000  0.0000  0.0000  0.0000  0.0000]"
expect_out "Unchosen rows, the engine's largest |dlogits|: 0 (of 35 numbers)."
expect_out "     by hand -0.278526"
check_page bert
# vit: the patch count, each patch's pixel order by the library and by
# hand, and dE.
expect_ok "$QKV_BIN/worked_example" --page vit
expect_out "N = (H/P)(W/P) = (4/2)(4/2) = 4 patches (patch_embed's Y has 4"
expect_out "   1  (0, 1)   by hand  0.02 0.03 0.12 0.13 1.02 1.03 1.12 1.13"
expect_out "               library  0.02 0.03 0.12 0.13 1.02 1.03 1.12 1.13"
expect_out " Library and by hand differ on 0 of the 32 entries."
expect_out "dE[0, 5] = 1 x 1.01 + 0 x 1.03 + 1 x 1.21 + 0.5 x 1.23 = 2.8350"
expect_out "(8,2)   [ 0.3100  0.3000]   [ 0.3100  0.3000]   [ 0.3100  0.3000]"
check_page vit
# All pages by default, each under its banner.
expect_ok "$QKV_BIN/worked_example"
check_page "all pages"
for page in moe relative-bias swiglu gqa bert vit; do
  grep -q "docs/$page-backward.md" "$QKV_TMP/out" || fail "the default run lacks $page's page"
done
