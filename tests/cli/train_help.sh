# train --help lists every flag in 80 columns; an unknown task is refused by name.
source "$(dirname "$0")/lib.bash"
expect_ok "$QKV_BIN/train" --help
expect_out "--task"
awk 'length > 80 { print "line over 80 columns: " $0; bad = 1 } END { exit bad }' "$QKV_TMP/out" || fail "help wider than 80 columns"
