#!/usr/bin/env bash
# docs/checkpoint-format.md is enough to write qkv's files from outside qkv:
# tests/pytorch/format_writer.py (Python's standard library alone, no qkv
# code) writes a model file and a training checkpoint of each family from
# the page's facts (and, for bert and vit, the data files the checkpoint
# names), and the trainer evaluates the checkpoint, answers from the model
# file and resumes the checkpoint's run. The model files are the
# committed ones whose logits tests/test_format_page.cpp compares with
# PyTorch's (tests/fixtures/format_*.safetensors).
source "$(dirname "$0")/lib.bash"
command -v python3 >/dev/null || { echo "skipped: no python3"; exit 0; }
cd "$QKV_TMP"

python3 "$QKV_SRC/tests/pytorch/format_writer.py" written >"$QKV_TMP/out" 2>&1 ||
  { cat "$QKV_TMP/out"; fail "tests/pytorch/format_writer.py did not write its files"; }

# Each family's first case is also resumed and asked; the second, which
# covers the page's other branches (Pre-LN, learned positions, a tied or
# untied head; the block keys norm, swiglu and bias; the attention keys
# kv_heads and rope_base; relative positions; a mixture of experts, k = 2
# and k = 1), is evaluated. The first mixture is also resumed (training
# steps, where its capacity drops assignments) and asked (decoding with the
# key/value cache, where it drops none).
for case in seq2seq gpt encoder seq2seq_preln gpt_tied encoder_preln gpt_llama seq2seq_rms gpt_gqa_rope seq2seq_relative gpt_moe gpt_moe_top1; do
  model=written/format_$case.safetensors ckpt=written/format_$case.ckpt.safetensors
  # The doctest's files are this writer's output (make fixtures wrote them).
  cmp "$model" "$QKV_SRC/tests/fixtures/format_$case.safetensors" ||
    fail "$model differs from tests/fixtures/format_$case.safetensors: run make fixtures"

  # The training checkpoint, evaluated on its run's own held-out data.
  expect_ok "$TRAIN" --load "$ckpt" --eval-only --threads 1
  expect_out "held-out"
  case $case in gpt_moe) ;; *_*) continue ;; esac

  # Resumed for two more steps, with the optimizer state it holds (Adam,
  # AdamW, sgd with momentum).
  expect_ok "$TRAIN" --load "$ckpt" --steps 6 --out "run_$case" --threads 1 --no-early-stop
  expect_out "from step 4"
  expect_out "checkpoint: run_$case/model.safetensors (step 6)"

  # The model file: asked in words, one answer line.
  "$TRAIN" --load "$model" --ask "a b c" --threads 1 >answer 2>"$QKV_TMP/out" ||
    { cat answer "$QKV_TMP/out"; fail "--ask on $model"; }
  [ "$(wc -l <answer)" -eq 1 ] || { cat answer; fail "--ask on $model printed $(wc -l <answer) lines"; }
done

# bert and vit: their checkpoints name data, which the writer writes beside
# them as the page says (a corpus, text<TAB>label lines, a folder of gzipped
# IDX files, SQuAD JSON): each checkpoint is evaluated on its run's own held-out part,
# bert_mlm and vit_gray are resumed, and each model file answers --ask
# without any data.
for case in bert_mlm bert_classify bert_qa vit_gray; do
  model=written/format_$case.safetensors ckpt=written/format_$case.ckpt.safetensors
  cmp "$model" "$QKV_SRC/tests/fixtures/format_$case.safetensors" ||
    fail "$model differs from tests/fixtures/format_$case.safetensors: run make fixtures"
  python3 "$QKV_SRC/tools/qkv_checkpoint.py" "$model" >"$QKV_TMP/out" 2>&1 ||
    { cat "$QKV_TMP/out"; fail "tools/qkv_checkpoint.py on $model"; }
  expect_out "model_kind: ${case%%_*}"
  expect_ok "$TRAIN" --load "$ckpt" --eval-only --threads 1
  case $case in
    bert_mlm) expect_out "held-out masked-token accuracy:" ;;
    bert_qa) expect_out "held-out exact match:" ;;
    *) expect_out "held-out accuracy:" ;;
  esac
  [ "$case" = bert_qa ] && continue  # evaluated; --ask with --passage: tests/cli/train_qa.sh
  if [ "$case" = bert_classify ]; then  # its labels: the page's metadata 'labels', its data's
    grep -qE '^ +w( +[0-9]+){4}$' "$QKV_TMP/out" || { cat "$QKV_TMP/out"; fail "no confusion row for label w"; }
    continue
  fi
  expect_ok "$TRAIN" --load "$ckpt" --steps 6 --out "run_$case" --threads 1 --no-early-stop
  expect_out "from step 4"
  expect_out "checkpoint: run_$case/model.safetensors (step 6)"
done

# The model files, with no data: a masked text gets candidates for its
# [MASK] (id 3, the default mask_id, which this vocabulary calls "a"), a
# text a label (the file names none: 0..3), a gray PGM a class.
expect_ok "$TRAIN" --load written/format_bert_mlm.safetensors --ask "b [MASK] c" --threads 1
grep -qE "^\[MASK\] 1: '[^']*' [0-9.]+(, '[^']*' [0-9.]+){4}$" "$QKV_TMP/out" ||
  { cat "$QKV_TMP/out"; fail "--ask on the bert mlm model file gave no five candidates"; }
[ "$(grep -c '^\[MASK\]' "$QKV_TMP/out")" -eq 1 ] || { cat "$QKV_TMP/out"; fail "one mask, one line"; }
expect_ok "$TRAIN" --load written/format_bert_mlm.safetensors --ask "b a c" --threads 1
grep -qE "^\[MASK\] 1: " "$QKV_TMP/out" || { cat "$QKV_TMP/out"; fail "the file's mask token 'a' was not filled in"; }
expect_fail "$TRAIN" --load written/format_bert_mlm.safetensors --ask "b c" --threads 1
expect_out "--ask: no [MASK] in"
expect_ok "$TRAIN" --load written/format_bert_classify.safetensors --ask "a b c" --threads 1
grep -qE '^[0-3] \(probability [0-9.]+\); then [0-3] [0-9.]+, [0-3] [0-9.]+$' "$QKV_TMP/out" ||
  { cat "$QKV_TMP/out"; fail "--ask on the bert classify model file gave no label"; }
python3 -c "
open('left.pgm', 'wb').write(b'P5\n6 6\n255\n' + bytes(220 if x < 3 else 20 for y in range(6) for x in range(6)))"
expect_ok "$TRAIN" --load written/format_vit_gray.safetensors --ask left.pgm --threads 1
grep -qE '^[0-2] \(probability [0-9.]+\); then [0-2] [0-9.]+, [0-2] [0-9.]+$' "$QKV_TMP/out" ||
  { cat "$QKV_TMP/out"; fail "--ask on the vit model file gave no class"; }
# A model file names no data: evaluating one needs --data.
expect_fail "$TRAIN" --load written/format_vit_gray.safetensors --eval-only --threads 1
expect_out "a model file does not record its data: give the images to evaluate on with --data DIR"
expect_fail "$TRAIN" --load written/format_bert_mlm.safetensors --eval-only --threads 1
expect_out "a model file does not record its data: give the text to evaluate on with --data FILE"

# The 2-channel vit: the library reads it (tests/test_format_page.cpp), the
# trainer, which reads gray IDX images and gray or RGB files, refuses it in
# one line.
cmp written/format_vit.safetensors "$QKV_SRC/tests/fixtures/format_vit.safetensors" ||
  fail "written/format_vit.safetensors differs from tests/fixtures/format_vit.safetensors: run make fixtures"
expect_fail "$TRAIN" --load written/format_vit.ckpt.safetensors --eval-only --threads 1
expect_out "its images are 6x6x1 but the model reads 6x6x2"
expect_fail "$TRAIN" --load written/format_vit.safetensors --ask left.pgm --threads 1
expect_out "left.pgm: an image of 1 channels, expected 2"

# A model file with a BPE tokenizer, its merges and vocabulary written from
# the page (the `bpe` key, each BPE token's bytes in GPT-2's mapping): qkv
# checks the vocabulary against the merges, so a wrong mapping is refused.
"$TRAIN" --load written/format_gpt_bpe.safetensors --ask "abcab x" --max-new 4 --threads 1 \
  >answer 2>"$QKV_TMP/out" || { cat answer "$QKV_TMP/out"; fail "--ask on format_gpt_bpe.safetensors"; }
[ "$(wc -l <answer)" -eq 1 ] || { cat answer; fail "--ask on the BPE model file printed $(wc -l <answer) lines"; }
python3 -c "
import json, sys
sys.path.insert(0, '$QKV_SRC/tools')
import qkv_checkpoint as qc
info = qc.model_info('written/format_gpt_bpe.safetensors')
assert info['token_bytes'][3 + 257] == b'abc', info['token_bytes'][3 + 257]
assert qc.bytes_of(info['vocab'][3 + 0x20]) == b' '" || fail "tools/qkv_checkpoint.py reads the BPE model file otherwise"
