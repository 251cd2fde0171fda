#!/usr/bin/env bash
# train --model encoder: the encoder-only model, one label per source token.
# It learns the reverse task (a bidirectional encoder sees the whole source)
# to a stated held-out accuracy, resumes from its checkpoint, evaluates and
# answers from it, trains on pairs data whose targets are as long as their
# sources (tagging), and refuses in one line: data whose lengths differ
# (naming the flag, the file and the first such line), beam decoding, and the
# architecture switches it does not have.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
ENC=(--model encoder --d-model 32 --heads 2 --layers 2 --d-ff 64 --batch 32 --symbols 6
     --min-len 2 --max-len 5 --heldout 50 --warmup 20 --threads 1)

# Reverse, to at least 90% held-out exact-sequence accuracy within 1000 steps
# (measured: 96-100% for seeds 1-5, from step 500 on).
expect_ok "$TRAIN" "${ENC[@]}" --task reverse --steps 1000 --eval-every 250 --out rev
expect_out "model: encoder, d_model 32, 2 heads, 2 layers,"
acc=$(sed -n 's/^held-out exact-sequence accuracy: \([0-9.]*\)%$/\1/p' "$QKV_TMP/out")
[ -n "$acc" ] || fail "no held-out accuracy line"
awk -v a="$acc" 'BEGIN { exit !(a >= 90) }' || { cat "$QKV_TMP/out"; fail "reverse reached only $acc% (want >= 90%)"; }
rev_acc=$acc
step=$(sed -n 's/^checkpoint: rev\/model.safetensors (step \([0-9]*\))$/\1/p' "$QKV_TMP/out")
[ -n "$step" ] || fail "no checkpoint line"
if grep -q "beam 4" "$QKV_TMP/out"; then fail "beam search ran beside the encoder"; fi

# --eval-only reproduces the final accuracy from the file alone.
expect_ok "$TRAIN" --load rev/model.safetensors --eval-only
expect_out "held-out exact-sequence accuracy: $acc%"
# Resume: from the step it stopped at, 50 more.
expect_ok "$TRAIN" --load rev/model.safetensors --steps $((step + 50)) --eval-every 0 --out rev
expect_out "from step $step"
expect_out "checkpoint: rev/model.safetensors (step $((step + 50)))"
# --ask: one label per input token.
expect_ok "$TRAIN" --load rev/model.safetensors --ask "a b c d"
[ "$(wc -w < "$QKV_TMP/out")" -eq 4 ] || { cat "$QKV_TMP/out"; fail "--ask gave not one label per token"; }
expect_ok "$TRAIN" --load rev/model.safetensors --ask "a b c d" --show-attention
expect_out "note: --show-attention: the encoder model has no cross-attention"

# Beam decoding: refused before any work, when training and when loading.
expect_fail "$TRAIN" "${ENC[@]}" --decode beam --steps 50 --out beam
expect_out "--decode beam: the encoder model (--model encoder) gives every source token its label"
[ ! -e beam ] || fail "a refused run left beam/ behind"
expect_fail "$TRAIN" --load rev/model.safetensors --ask "a b" --decode beam
expect_out "--decode beam: the encoder model"
# What the encoder model does not have.
expect_fail "$TRAIN" "${ENC[@]}" --tie
expect_out "--tie: the encoder model's output layer gives labels"
expect_fail "$TRAIN" "${ENC[@]}" --positions learned
expect_out "--positions: the encoder model (nn::EncoderOnlyModel) has sinusoidal positions or T5's relative bias (relative), not '"

# Tagging: each letter of a word labelled V (vowel) or C; targets as long as sources.
awk 'BEGIN { srand(3); split("a b c d e f g h i j k l m n o p", L, " ");
  for (n = 0; n < 300; n++) { w = ""; t = ""; len = 3 + int(rand() * 6);
    for (k = 0; k < len; k++) { c = L[1 + int(rand() * 16)]; w = w c; t = t (c ~ /[aeio]/ ? "V" : "C") }
    print w "\t" t } }' > tags.tsv
expect_ok "$TRAIN" --model encoder --data tags.tsv --d-model 32 --heads 2 --layers 1 --d-ff 64 \
  --batch 32 --steps 300 --eval-every 100 --warmup 10 --threads 1 --out tags
acc=$(sed -n 's/^held-out exact-sequence accuracy: \([0-9.]*\)%$/\1/p' "$QKV_TMP/out")
[ -n "$acc" ] || fail "no held-out accuracy line for tagging"
awk -v a="$acc" 'BEGIN { exit !(a >= 90) }' || { cat "$QKV_TMP/out"; fail "tagging reached only $acc% (want >= 90%)"; }
expect_ok "$TRAIN" --load tags/model.safetensors --ask "bead"
[ "$(cat "$QKV_TMP/out")" = "CVVC" ] || { cat "$QKV_TMP/out"; fail "--ask bead: want CVVC"; }

# Pairs whose lengths differ: one line naming the flag, the file and the first such line.
printf 'abc\tVCC\nab\tVC\nabcd\tVC\nab\tVCC\n' > mixed.tsv
expect_fail "$TRAIN" --model encoder --data mixed.tsv --out mixed
expect_out "error: --model encoder: mixed.tsv:3: the source has 4 tokens and the target 2"
[ "$(wc -l < "$QKV_TMP/out")" -eq 1 ] || { cat "$QKV_TMP/out"; fail "the error is not one line"; }
[ ! -e mixed ] || fail "a refused run left mixed/ behind"
printf 'ab\tVC\nabc\tVCC\n' > valid.tsv
printf 'ab\tVC\nabc\tVC\n' > badvalid.tsv
expect_fail "$TRAIN" --model encoder --data valid.tsv --valid badvalid.tsv --out mixed
expect_out "error: --model encoder: badvalid.tsv:2: the source has 3 tokens and the target 2"
echo "reverse $rev_acc% held-out, resumed from step $step; tagging $acc%; refusals"
