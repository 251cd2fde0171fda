# A run that diverges (exit 3) reruns the failing step in detect-anomaly mode
# from the state before it (Trainer::rerun_diverged_step) and names what
# made the non-finite numbers: with a learning rate of 1e6 the step's
# attention backward overflows to -inf; with 30 the loss explodes while every
# number stays finite, and the rerun says no op made a NaN or Inf, with the
# same loss as the step that diverged (the same batch, redrawn).
. "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
run() {  # run LR: a tiny run that must exit 3
  set +e
  "$TRAIN" --task reverse "${TINY[@]}" --steps 20 --lr "$1" --clip 0 --schedule constant \
    --no-save >"$QKV_TMP/out" 2>&1
  local rc=$?
  set -e
  [ "$rc" = 3 ] || { cat "$QKV_TMP/out"; fail "--lr $1: expected exit 3, got $rc"; }
}
run 1e6
expect_out "rerun in detect-anomaly mode (float32): the first op whose gradient was not finite"
expect_out "backward of multi_head_attention"
run 30
expect_out "rerun in detect-anomaly mode (float32): no op made a NaN or Inf"
loss=$(sed -n 's/.*the loss \([^ ]*\) is over.*/\1/p' "$QKV_TMP/out")
[ -n "$loss" ] || { cat "$QKV_TMP/out"; fail "no diverged loss"; }
expect_out "(the loss $loss is finite)"
