# A disk that fills up during training (a small tmpfs, filled once training
# runs): the periodic saves and the log fail with a warning and training goes
# on; the final checkpoint goes to the rescue path the program names, and it
# loads. Needs root's mount (CI runs as root); skipped where mounting fails.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
mkdir small
if ! mount -t tmpfs -o size=512k tmpfs small 2>/dev/null; then
  echo "skipped: cannot mount a tmpfs here"
  exit 0
fi
trap 'umount "$QKV_TMP/small" 2>/dev/null || true' EXIT
wait_for() { for _ in $(seq 600); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; fail "no '$2' in $1"; }

# 5,000 steps: on an idle machine 400 took 0.1 s, over before the disk filled.
"$TRAIN" "${TINY[@]}" --steps 5000 --log-every 1 --save-every 10 --out small/run >log 2>&1 &
pid=$!
wait_for log "^step *20 "
dd if=/dev/zero of=small/filler bs=4k 2>/dev/null || true   # until the disk is full
status=0; wait $pid || status=$?
grep -q "warning: the checkpoint of step .* could not be written" log || { cat log; fail "no warning for a periodic save on a full disk"; }
grep -q "^step *5000 " log || { cat log; fail "training stopped when the disk filled up"; }
rescued=$(sed -n 's/^checkpoint: \(.*\) (step 5000)$/\1/p' log)
[ -n "$rescued" ] && [ -f "$rescued" ] || { cat log; fail "the final checkpoint was not written anywhere"; }
case "$rescued" in small/*) fail "the rescued checkpoint $rescued is on the full disk" ;; esac
[ "$status" -eq 1 ] || fail "a checkpoint written to its rescue path should end with status 1, got $status"
expect_ok "$TRAIN" --load "$rescued" --eval-only
expect_out "held-out exact-sequence accuracy"
