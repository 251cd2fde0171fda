# A diverging run (--lr 1e3) stops at once with a message naming the step,
# exits non-zero and writes nothing over the last good checkpoint.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
expect_ok "$TRAIN" "${TINY[@]}" --steps 5 --out run --no-early-stop
good=$(md5sum < run/model.safetensors)
set +e
"$TRAIN" "${TINY[@]}" --steps 500 --lr 1e3 --schedule constant --out run > out 2>&1
rc=$?
set -e
[ $rc -eq 3 ] || { cat out; fail "a diverging run exited $rc, not 3"; }
grep -qE "error: step [0-9]+: the (loss|gradient norm)" out || { cat out; fail "no message naming the step"; }
grep -q "no checkpoint was written" out || fail "does not say that no checkpoint was written"
[ "$(md5sum < run/model.safetensors)" = "$good" ] || fail "the good checkpoint was overwritten"
