# SIGTERM, SIGINT and SIGHUP while training: the step finishes, the checkpoint
# is written and loads, the exit status is 128 + the signal; a second signal
# ends the program at once. A periodic save that fails is a warning: training
# goes on and the final checkpoint is still written (here, to its rescue path).
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
# wait_for FILE TEXT: until TEXT appears in FILE (at most 60 s).
wait_for() { for _ in $(seq 600); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; fail "no '$2' in $1"; }

for sig in TERM INT HUP; do
  "$TRAIN" "${TINY[@]}" --steps 1000000 --log-every 1 --out "run_$sig" >"log_$sig" 2>&1 &
  pid=$!
  wait_for "log_$sig" "^step"
  kill -s "$sig" $pid
  status=0; wait $pid || status=$?
  want=$((128 + $(kill -l "$sig")))
  [ "$status" -eq "$want" ] || { cat "log_$sig"; fail "SIG$sig: exit status $status, want $want"; }
  grep -q "stopped by SIG$sig after step" "log_$sig" || { cat "log_$sig"; fail "SIG$sig: no 'stopped by' line"; }
  step=$(sed -n 's/^checkpoint: .* (step \([0-9]*\))$/\1/p' "log_$sig")
  [ -n "$step" ] && [ "$step" -gt 0 ] || { cat "log_$sig"; fail "SIG$sig: no checkpoint line"; }
  expect_ok "$TRAIN" --load "run_$sig/model.safetensors" --eval-only
  expect_out "held-out exact-sequence accuracy"
done

# Two signals: the second ends the program at once, with the signal's own status.
"$TRAIN" "${TINY[@]}" --steps 1000000 --log-every 1 --out run_twice >log_twice 2>&1 &
pid=$!
wait_for log_twice "^step"
kill -s INT $pid; kill -s INT $pid
status=0; wait $pid || status=$?
[ "$status" -ne 0 ] || fail "two SIGINTs: exit status 0"

# A periodic save that fails (its directory removed mid-run) warns and trains on.
mkdir keep
"$TRAIN" "${TINY[@]}" --steps 400 --log-every 1 --save-every 5 --save keep/model.safetensors --out run_save \
  >log_save 2>&1 &
pid=$!
wait_for log_save "^step"
# The trainer may be writing its temporary file in keep/ at that moment: rm
# then finds the folder not empty, so try again until it is gone.
for _ in $(seq 50); do
  rm -rf keep 2>/dev/null && [ ! -e keep ] && break
  sleep 0.02
done
[ ! -e keep ] || fail "could not remove keep/ while the trainer saved into it"
status=0; wait $pid || status=$?
grep -q "warning: the checkpoint of step .* could not be written" log_save || { cat log_save; fail "no warning for a failed periodic save"; }
grep -q "^step *400 " log_save || { cat log_save; fail "training stopped after a failed periodic save"; }
rescued=$(sed -n 's/^checkpoint: \(.*\) (step 400)$/\1/p' log_save)
[ -n "$rescued" ] && [ -f "$rescued" ] || { cat log_save; fail "the final checkpoint was not written anywhere"; }
[ "$status" -eq 1 ] || fail "a checkpoint written to its rescue path should end with status 1, got $status"

# stdout's reader goes away (train | head): the run is not killed by SIGPIPE
# at its next line; it trains to the end and writes a checkpoint that loads.
set +e
"$TRAIN" "${TINY[@]}" --steps 300 --log-every 1 --out run_pipe 2>log_pipe_err | head -n 2 >log_pipe
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || { cat log_pipe log_pipe_err; fail "train | head: exit status $status, want 0"; }
expect_ok "$TRAIN" --load run_pipe/model.safetensors --eval-only
expect_out "held-out exact-sequence accuracy"
expect_out ", from step 300"
