# A checkpoint describes its run: --load X --eval-only needs no other flag and
# reproduces the accuracy printed at the end of training, without touching the
# run's log or plots; a flag that disagrees with the file is refused by name.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
expect_ok "$TRAIN" "${TINY[@]}" --steps 150 --lr 3e-3 --dropout 0.1 --out run --label-smoothing 0.05
acc=$(grep "^held-out exact-sequence accuracy" "$QKV_TMP/out")
[ -n "$acc" ] || fail "no final accuracy line"
before=$(md5sum run/log.csv run/loss.svg run/attention.svg)

expect_ok "$TRAIN" --load run/model.safetensors --eval-only
grep -qxF "$acc" "$QKV_TMP/out" || { cat "$QKV_TMP/out"; fail "eval-only gave another accuracy than '$acc'"; }
[ "$(md5sum run/log.csv run/loss.svg run/attention.svg)" = "$before" ] || fail "--eval-only changed the run's files"

# A flag that agrees is fine; one that disagrees names the flag and both values.
expect_ok "$TRAIN" --load run/model.safetensors --eval-only --d-model 16 --lr 0.003
expect_fail "$TRAIN" --load run/model.safetensors --eval-only --d-model 32
expect_out "--d-model: the checkpoint run/model.safetensors was trained with --d-model 16, but the command line gives 32"
expect_fail "$TRAIN" --load run/model.safetensors --eval-only --lr 1e-7
expect_out "trained with --lr 0.003, but the command line gives 1e-07"
expect_fail "$TRAIN" --load run/model.safetensors --eval-only --task copy
expect_out "--task: the checkpoint run/model.safetensors was trained with --task reverse"

# Tiny learning rates are kept exactly: 1e-7 and 2e-7 differ.
expect_ok "$TRAIN" "${TINY[@]}" --steps 2 --lr 1e-7 --out small --no-early-stop
expect_fail "$TRAIN" --load small/model.safetensors --lr 2e-7 --steps 4
expect_out "was trained with --lr 1e-07, but the command line gives 2e-07"

# Resuming with only a longer --steps continues the run (and writes a new checkpoint).
expect_ok "$TRAIN" --load run/model.safetensors --steps 160 --out run_more --no-early-stop
expect_out "from step 150"
expect_out "checkpoint: run_more/model.safetensors (step 160)"
# A run resumed into its own folder adds to its log, never truncates it.
rows_before=$(grep -c '^[0-9]' run/log.csv)
expect_ok "$TRAIN" --load run/model.safetensors --steps 155 --out run --no-early-stop
[ "$(grep -c '^[0-9]' run/log.csv)" -eq $((rows_before + 5)) ] || fail "resuming rewrote run/log.csv"
[ "$(grep -c '^step,' run/log.csv)" -eq 1 ] || fail "resuming wrote a second header into run/log.csv"
# A log begun by an older build (9 columns, before heldout_bits_per_byte) gets
# rows of its own 9 columns when the run is resumed into it.
mkdir old && cp run/model.safetensors old/ &&
  printf 'step,loss,lr,tokens_per_s,grad_norm,heldout_exact,heldout_token,heldout_loss,heldout_bleu\n1,2,3,4,5,,,,\n' >old/log.csv
expect_ok "$TRAIN" --load old/model.safetensors --steps 161 --out old --no-early-stop --eval-every 3
awk -F, '{ if (NF != 9) { print "line " NR " has " NF " fields: " $0; bad = 1 } } END { exit bad }' old/log.csv ||
  fail "a resumed run wrote rows wider than its log's 9-column header"
[ "$(grep -c '^[0-9]' old/log.csv)" -ge 7 ] || fail "the resumed run added no rows to the old log"

# Fine-tuning: a new run (fresh optimizer, step 0) from the checkpoint's weights,
# architecture and vocabulary; an architecture flag must agree with the file.
expect_ok "$TRAIN" --init-from run/model.safetensors --steps 5 --warmup 1 --out tuned
expect_out "fine-tuning the weights of run/model.safetensors"
expect_out "checkpoint: tuned/model.safetensors (step 5)"
expect_fail "$TRAIN" --init-from run/model.safetensors --d-model 32 --steps 5
expect_out "--d-model: --init-from run/model.safetensors holds a model with --d-model 16"
expect_fail "$TRAIN" --init-from run/model.safetensors --load run/model.safetensors
expect_out "--init-from: starts a new run; --load resumes one"

# Ask the model: one line, or lines on stdin.
expect_ok "$TRAIN" --load run/model.safetensors --ask "a b c"
[ "$(wc -l < "$QKV_TMP/out")" -eq 1 ] || fail "--ask printed more than its answer"
printf 'a b\nc d e\n' | "$TRAIN" --load run/model.safetensors --ask - > answers || fail "--ask - failed"
[ "$(wc -l < answers)" -eq 2 ] || fail "--ask - did not answer each line"
expect_fail "$TRAIN" --load run/model.safetensors --ask "a z"
expect_out "unknown token 'z'"
expect_ok "$TRAIN" --load run/model.safetensors --ask "a b c" --show-attention
expect_out "cross-attention of the last decoder layer"

# Not a training checkpoint, a missing file: clear errors.
expect_fail "$TRAIN" --load missing.safetensors --eval-only
expect_out "missing.safetensors"
echo "not a checkpoint" > junk.safetensors
expect_fail "$TRAIN" --load junk.safetensors --eval-only
expect_out "junk.safetensors"

# Decoders: the final report gives greedy and beam accuracy; --decode beam is
# used for --ask and the checks; bad decoder options name the flag.
expect_ok "$TRAIN" --load run/model.safetensors --eval-only
expect_out "greedy:"
expect_out "beam 4 (alpha 0.6):"
expect_ok "$TRAIN" --load run/model.safetensors --ask "a b c" --decode beam --beam 3
[ "$(wc -l < "$QKV_TMP/out")" -eq 1 ] || fail "--decode beam --ask printed more than its answer"
expect_fail "$TRAIN" --load run/model.safetensors --eval-only --decode sample
expect_out "--decode: expected greedy or beam"
expect_fail "$TRAIN" --load run/model.safetensors --eval-only --beam 0
expect_out "--beam: must be in [1, 256]"
expect_fail "$TRAIN" --load run/model.safetensors --eval-only --top-p 1.5
expect_out "--top-p"
