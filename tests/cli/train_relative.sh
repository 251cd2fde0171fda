#!/usr/bin/env bash
# T5's relative positions (--positions relative --rel-buckets --rel-max-distance):
# a tiny seq2seq and a tiny gpt train with them and their loss falls; the
# model line says so; the seq2seq scores longer sequences length by length
# (--long-lengths); the file holds the keys and evaluates from another
# folder with nothing but the file; the Python reader reads them; and the
# bad inputs are refused in one line before training: an odd or too small
# bucket count, a maximum distance not past the exact buckets, a sparse or
# linear kernel, --rel-* without --positions relative, a bert or vit, and
# a --long-lengths that is no range or passes a learned position table.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
REL=(--positions relative --rel-buckets 8 --rel-max-distance 16)

# (a) seq2seq and gpt train with relative positions; the loss falls.
for fam in seq2seq gpt; do
  expect_ok "$TRAIN" --model "$fam" "${TINY[@]}" "${REL[@]}" --steps 60 --lr 3e-3 --out "$fam"
  expect_out "relative positions"
  first=$(sed -n 2p "$fam/log.csv" | cut -d, -f2)
  last=$(tail -n 1 "$fam/log.csv" | cut -d, -f2)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.2) }' ||
    fail "$fam --positions relative: loss went from $first to $last in 60 steps (want a fall of > 0.2)"
  # --load X --eval-only from another folder: the same numbers as here
  expect_ok "$TRAIN" --load "$fam/model.safetensors" --eval-only
  expect_out "held-out exact-sequence accuracy"
  here=$(grep "held-out" "$QKV_TMP/out")
  mkdir -p "elsewhere_$fam"
  (cd "elsewhere_$fam" && "$TRAIN" --load "../$fam/model.safetensors" --eval-only >"$QKV_TMP/out" 2>&1) ||
    { cat "$QKV_TMP/out"; fail "$fam --eval-only from another folder"; }
  [ "$(grep "held-out" "$QKV_TMP/out")" = "$here" ] ||
    { cat "$QKV_TMP/out"; fail "$fam --eval-only from another folder said otherwise than '$here'"; }
  echo "$fam: $first -> $last"
done
# The encoder model trains a few steps with them too.
expect_ok "$TRAIN" --model encoder "${TINY[@]}" "${REL[@]}" --steps 3 --out enc
expect_out "relative positions"

# (a2) --long-lengths: the trained seq2seq on longer task sequences than it
#      trained on (TINY's 2..5), one line per length, from its file.
expect_ok "$TRAIN" --load seq2seq/model.safetensors --eval-only --long-lengths 6-8
expect_out "length generalization (200 sequences of each length 6..8; trained on 2..5):"
for n in 6 7 8; do
  grep -Eq "^  length $n: exact [0-9.]+%, token [0-9.]+%, BLEU [0-9.]+, perplexity [0-9.]+$" "$QKV_TMP/out" ||
    { cat "$QKV_TMP/out"; fail "no line for length $n"; }
done
[ "$(grep -c '^  length ' "$QKV_TMP/out")" = 3 ] || { cat "$QKV_TMP/out"; fail "not 3 length lines"; }

# (b) The Python reader reads the keys, and refuses a file whose tables
#     disagree with them.
if command -v python3 >/dev/null; then
  expect_ok python3 "$QKV_SRC/tools/qkv_checkpoint.py" seq2seq/model.safetensors
  expect_out "relative positions: 8 buckets, max distance 16"
  PYTHONPATH="$QKV_SRC/tools" python3 - seq2seq/model.safetensors <<'EOF' >"$QKV_TMP/out" 2>&1 ||
import sys
import qkv_checkpoint as qc
tensors, md = qc.read(sys.argv[1])
qc.write("no_table.safetensors", {k: v for k, v in tensors.items() if k != "model.decoder.rel_bias"}, md)
try:
    qc.model_info("no_table.safetensors")
    sys.exit("a seq2seq without decoder.rel_bias was accepted")
except ValueError as e:
    print(e)
EOF
    { cat "$QKV_TMP/out"; fail "tools/qkv_checkpoint.py on a file without a table"; }
  expect_out "model_config has rel_buckets 8, but the file has no tensor 'model.decoder.rel_bias'"
fi

# (c) Bad input: one line each, before training.
one_line() {
  expect_fail "$@"
  [ "$(wc -l < "$QKV_TMP/out")" = 1 ] || { cat "$QKV_TMP/out"; fail "not one line: $*"; }
}
is() { [ "$(cat "$QKV_TMP/out")" = "$1" ] || { cat "$QKV_TMP/out"; fail "want: $1"; }; }
one_line "$TRAIN" "${TINY[@]}" --positions relative --rel-buckets 0 --steps 1
is "error: --rel-buckets must be in [4, 4096], got 0"
one_line "$TRAIN" "${TINY[@]}" --positions relative --rel-buckets 7 --steps 1
is "error: --rel-buckets: must be even (half the buckets per direction in an encoder), got 7"
one_line "$TRAIN" "${TINY[@]}" --positions relative --rel-max-distance 16 --steps 1
is "error: --rel-max-distance: must exceed the 16 exact buckets (--rel-buckets 32 / 2) and be at most 2^30, got 16"
one_line "$TRAIN" "${TINY[@]}" --positions relative --attention linear --steps 1
is "error: --attention: the linear kernel takes no --positions relative (standard, memory-efficient or auto do)"
one_line "$TRAIN" "${TINY[@]}" --positions relative --attention sparse --steps 1
is "error: --attention: the sparse kernel takes no --positions relative (standard, memory-efficient or auto do)"
one_line "$TRAIN" "${TINY[@]}" --rel-buckets 16 --steps 1
is "error: --rel-buckets: sets relative positions' buckets; give --positions relative too (or leave it out)"
one_line "$TRAIN" "${TINY[@]}" --rel-max-distance 64 --steps 1
is "error: --rel-max-distance: sets relative positions' last distance; give --positions relative too (or leave it out)"
one_line "$TRAIN" "${TINY[@]}" --long-lengths 8-6 --steps 1
is "error: --long-lengths: expected A-B, two lengths with 1 <= A <= B <= 4096, got '8-6'"
one_line "$TRAIN" --load seq2seq/model.safetensors --ask "a b" --long-lengths 6-8
is "error: --long-lengths: goes with a training run or --eval-only, not --ask or --explain"
one_line "$TRAIN" --data "$QKV_SRC/datasets/translation/valid.tsv" --tokens word "${TINY[@]}" \
  --long-lengths 6-8 --steps 1 --out from_file
is "error: --long-lengths: sets the built-in task's longer set (--task, without --data); for pairs from a file, give --valid a file of longer pairs"
one_line "$TRAIN" "${TINY[@]}" --positions learned --long-lengths 6-9 --steps 5
is "error: --long-lengths 6-9: a sequence of 9 symbols and its answer need 10 positions; this model's learned position table holds 6 (train with --context 10)"
one_line "$TRAIN" --model bert --data /dev/null "${TINY[@]}" --positions relative --steps 1
is "error: --positions: the bert model has a learned position table, not 'relative'"
echo "relative positions: seq2seq and gpt train, load elsewhere, bad input refused"
