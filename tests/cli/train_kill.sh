# Crash-safe checkpoints: the trainer is killed with SIGKILL at random moments
# while it saves every step (--save-every 1); each time the checkpoint on disk
# loads, and no temporary files pile up. QKV_KILL_TRIES sets the count
# (10 here; `make test-faults` runs 100).
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
tries=${QKV_KILL_TRIES:-10}
# A bigger model than TINY, so that a save takes long enough to be hit.
args=("${TINY[@]}" --d-model 64 --d-ff 256 --layers 2 --steps 100000 --no-early-stop --save-every 1 --out run)
expect_ok "$TRAIN" "${TINY[@]}" --steps 1 --out run   # a first good checkpoint
for i in $(seq "$tries"); do
  "$TRAIN" "${args[@]}" > /dev/null 2>&1 &
  pid=$!
  sleep "0.$((RANDOM % 9 + 1))$((RANDOM % 10))"
  kill -KILL $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  "$TRAIN" --load run/model.safetensors --eval-only --threads 1 > "$QKV_TMP/out" 2>&1 \
    || { cat "$QKV_TMP/out"; fail "try $i: the checkpoint does not load after SIGKILL"; }
  left=$(ls run | grep -c '\.tmp\.' || true)
  [ "$left" -le 1 ] || { ls -la run; fail "try $i: $left temporary files left"; }
done
# Resuming from the survivor works.
step=$(grep -ao '"step":"[0-9]*"' run/model.safetensors | head -1 | tr -dc 0-9)
[ -n "$step" ] || fail "no step in the checkpoint's metadata"
expect_ok "$TRAIN" --load run/model.safetensors --steps $((step + 2)) --threads 1 --no-save --eval-every 0
expect_out "from step $step"
