# step_through: flags checked before any work (each error naming the flag), and part 1 shown three ways.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
expect_fail "$QKV_BIN/step_through" --part 3
expect_out "--part"
expect_fail "$QKV_BIN/step_through" --dot missing/graph.dot
expect_out "--dot missing/graph.dot: the directory missing does not exist"
grep -q "Part 1" "$QKV_TMP/out" && fail "worked before refusing --dot"
mkdir adir
expect_fail "$QKV_BIN/step_through" --dot adir
expect_out "--dot adir: is a directory"
expect_ok "$QKV_BIN/step_through" --part 1 --no-fd
# Part 1 prints each gradient three ways: the hand formula, the engine and a
# finite difference, and the largest gaps between them.
expect_ok "$QKV_BIN/step_through" --part 1
expect_out "formula  [-0.4455 -0.0545  0.2243  0.2757]"
expect_out "engine   [-0.4455 -0.0545  0.2243  0.2757]"
expect_out "fin.diff [-0.4455 -0.0545  0.2243  0.2757]"
gap=$(sed -n 's/.*max |engine - formula| over all of the above: //p' "$QKV_TMP/out" | head -1)
awk -v g="$gap" 'BEGIN { exit !(g != "" && g + 0 < 1e-5) }' || fail "engine and formula differ by $gap"
awk 'length > 80 { bad = 1 } END { exit bad }' "$QKV_TMP/out" || fail "part 1 is wider than 80 columns"
