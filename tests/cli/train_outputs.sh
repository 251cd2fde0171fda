# Output paths are checked before the first step; the checkpoint is written
# before logs and plots, and a plot failure neither prevents nor undoes it.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"

# --out is a file: refused at once, nothing trained.
touch not_a_dir
expect_fail "$TRAIN" "${TINY[@]}" --steps 3 --out not_a_dir
expect_out "--out not_a_dir: exists and is not a directory"
grep -q "^step" "$QKV_TMP/out" && fail "trained with an unusable --out"

# --save in a missing directory: refused, and the new --out directory is not left behind.
expect_fail "$TRAIN" "${TINY[@]}" --steps 3 --out fresh/run --save missing/m.safetensors
expect_out "--save missing/m.safetensors: the directory missing does not exist"
[ -e fresh ] && fail "left the --out directory behind"

# --out cannot take files (a path below a regular file).
expect_fail "$TRAIN" "${TINY[@]}" --steps 3 --out not_a_dir/sub
expect_out "--out not_a_dir/sub"

# A plot path that is a directory: refused before any work.
mkdir -p run && mkdir run/loss.svg
expect_fail "$TRAIN" "${TINY[@]}" --steps 20 --out run
expect_out "--out run/loss.svg: is a directory, not a file path"
rmdir run/loss.svg

# A plot that cannot be written when it is written (here a directory in the
# way of its temporary file, named with the trainer's pid, which exec keeps):
# the checkpoint is there and loads; exit non-zero.
expect_fail bash -c 'mkdir run/loss.svg.tmp.$$ && exec "$0" "$@"' "$TRAIN" "${TINY[@]}" --steps 20 --out run
expect_out "error writing loss.svg"
expect_out "wrote run/log.csv, attention.svg"   # what was written, and only that
grep -q "^wrote .*loss.svg" "$QKV_TMP/out" && fail "a plot that could not be written was reported as written"
expect_out "checkpoint: run/model.safetensors (step 20)"
expect_ok "$TRAIN" --load run/model.safetensors --eval-only --threads 1
expect_out "held-out exact-sequence accuracy"

# The checkpoint's directory vanishes during training: the model is written to
# a fallback path that the program names, and that file loads.
mkdir ckdir
"$TRAIN" "${TINY[@]}" --steps 3000 --no-early-stop --log-every 20 --out run3 --save ckdir/m.safetensors > log3 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q "^step" log3 && break; sleep 0.05; done
rm -rf ckdir
wait $pid && fail "a lost checkpoint directory must give a non-zero exit" || true
grep -q "could not write ckdir/m.safetensors; wrote" log3 || { cat log3; fail "no fallback checkpoint named"; }
rescued=$(sed -n 's/.*; wrote \(.*\) instead/\1/p' log3 | head -1)
[ -f "$rescued" ] || fail "the named fallback $rescued does not exist"
expect_ok "$TRAIN" --load "$rescued" --eval-only --threads 1
rm -f "$rescued"

# The save folder, the working folder and $TMPDIR all cannot take files: the
# first two are removed mid-run, and TMPDIR=/proc is a folder that takes no
# files even for root (chmod stops no root). /tmp is tried too, and takes it.
mkdir ckdir5 wd5
(cd wd5 && TMPDIR=/proc exec "$TRAIN" "${TINY[@]}" --steps 1500 --no-early-stop --log-every 20 \
  --out "$QKV_TMP/run5" --save "$QKV_TMP/ckdir5/m.safetensors") >log5 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q "^step" log5 && break; sleep 0.05; done
rm -rf ckdir5 wd5
wait $pid && fail "a checkpoint written to its rescue path must give a non-zero exit" || true
grep -q "could not write $QKV_TMP/ckdir5/m.safetensors; wrote /tmp/m.safetensors.rescued-" log5 ||
  { cat log5; fail "the checkpoint was not rescued to /tmp"; }
rescued=$(sed -n 's/.*; wrote \(.*\) instead/\1/p' log5 | head -1)
[ -f "$rescued" ] || fail "the named fallback $rescued does not exist"
expect_ok "$TRAIN" --load "$rescued" --eval-only --threads 1
rm -f "$rescued"

# A TMPDIR that does not exist (the rescue path's folder) never stops the
# checkpoint from being written where it was asked.
TMPDIR=/no/such/dir expect_ok "$TRAIN" "${TINY[@]}" --steps 5 --out tmpdir_gone
expect_out "checkpoint: tmpdir_gone/model.safetensors (step 5)"
# An encoder-decoder with learned positions evaluates and answers within its
# position table (the answer's length is capped by it).
expect_ok "$TRAIN" "${TINY[@]}" --positions learned --steps 5 --eval-every 5 --out learned
expect_out "held-out at step 5"
expect_ok "$TRAIN" --load learned/model.safetensors --ask "a b c"
