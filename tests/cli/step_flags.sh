# step_through's flags are checked before any work, each error naming the flag.
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
