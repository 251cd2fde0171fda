#!/usr/bin/env bash
# T5's relative positions (--positions relative --rel-buckets --rel-max-distance):
# a tiny seq2seq and a tiny gpt train with them and their loss falls; the
# model line says so; the file holds the keys and evaluates from another
# folder with nothing but the file; the Python reader reads them; and the
# bad inputs are refused in one line before training: an odd or too small
# bucket count, a maximum distance not past the exact buckets, a sparse or
# linear kernel, --rel-* without --positions relative, and a bert or vit.
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

# (b) The Python reader reads the keys.
if command -v python3 >/dev/null; then
  expect_ok python3 "$QKV_SRC/tools/qkv_checkpoint.py" seq2seq/model.safetensors
  expect_out "relative positions: 8 buckets, max distance 16"
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
one_line "$TRAIN" --model bert --data /dev/null "${TINY[@]}" --positions relative --steps 1
is "error: --positions: the bert model has a learned position table"
echo "relative positions: seq2seq and gpt train, load elsewhere, bad input refused"
