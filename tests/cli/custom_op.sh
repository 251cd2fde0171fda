#!/usr/bin/env bash
# examples/custom_op (an op defined outside the library, examples/custom_op.h):
# its float32 gradcheck passes, a bad gamma is refused with the op's error,
# and training the small model with it lowers the loss at least tenfold.
source "$(dirname "$0")/lib.bash"
expect_ok "$QKV_BIN/custom_op"
expect_out "gradcheck of rms_norm (float32): gradcheck passed"
expect_out "a bad call throws: rms_norm: input (2,3,4) needs gamma of shape (4), got (5)"
read -r first last < <(sed -n 's/^ *loss \([0-9.]*\) -> \([0-9.]*\) .*/\1 \2/p' "$QKV_TMP/out")
[ -n "${first:-}" ] || { cat "$QKV_TMP/out"; fail "no final 'loss A -> B' line"; }
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b * 10 < a) }' ||
  { cat "$QKV_TMP/out"; fail "loss fell only from $first to $last"; }
# Every printed step's loss is below the first one.
awk '/^ *step +[0-9]+ +loss/ { v = $4; if (n++ == 0) f = v; else if (v >= f) bad = 1 }
     END { exit !(n >= 5 && !bad) }' "$QKV_TMP/out" || { cat "$QKV_TMP/out"; fail "loss did not fall"; }
