#!/usr/bin/env bash
# docs/checkpoint-format.md is enough to write qkv's files from outside qkv:
# tests/pytorch/format_writer.py (Python's standard library alone, no qkv
# code) writes a model file and a training checkpoint of each family from
# the page's facts, and the trainer evaluates the checkpoint, answers from
# the model file and resumes the checkpoint's run. The model files are the
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
# kv_heads and rope_base; relative positions), is evaluated.
for case in seq2seq gpt encoder seq2seq_preln gpt_tied encoder_preln gpt_llama seq2seq_rms gpt_gqa_rope seq2seq_relative; do
  model=written/format_$case.safetensors ckpt=written/format_$case.ckpt.safetensors
  # The doctest's files are this writer's output (make fixtures wrote them).
  cmp "$model" "$QKV_SRC/tests/fixtures/format_$case.safetensors" ||
    fail "$model differs from tests/fixtures/format_$case.safetensors: run make fixtures"

  # The training checkpoint, evaluated on its run's own held-out data.
  expect_ok "$TRAIN" --load "$ckpt" --eval-only --threads 1
  expect_out "held-out"
  case $case in *_*) continue ;; esac

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

# The bert files: the writer's output is the committed fixtures (whose
# logits tests/test_format_page.cpp checks), and the standard-library reader
# takes them. (The trainer's steps above come when it trains the family.)
for case in bert_mlm bert_classify; do
  model=written/format_$case.safetensors
  cmp "$model" "$QKV_SRC/tests/fixtures/format_$case.safetensors" ||
    fail "$model differs from tests/fixtures/format_$case.safetensors: run make fixtures"
  python3 "$QKV_SRC/tools/qkv_checkpoint.py" "$model" >"$QKV_TMP/out" 2>&1 ||
    { cat "$QKV_TMP/out"; fail "tools/qkv_checkpoint.py on $model"; }
  expect_out "model_kind: bert"
done

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
