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

for kind in seq2seq gpt encoder; do
  model=written/format_$kind.safetensors ckpt=written/format_$kind.ckpt.safetensors
  # The doctest's files are this writer's output (make fixtures wrote them).
  cmp "$model" "$QKV_SRC/tests/fixtures/format_$kind.safetensors" ||
    fail "$model differs from tests/fixtures/format_$kind.safetensors: run make fixtures"

  # The training checkpoint: evaluated on its run's own held-out data ...
  expect_ok "$TRAIN" --load "$ckpt" --eval-only --threads 1
  expect_out "held-out"
  # ... and resumed for two more steps, with the optimizer state it holds.
  expect_ok "$TRAIN" --load "$ckpt" --steps 6 --out "run_$kind" --threads 1 --no-early-stop
  expect_out "from step 4"
  expect_out "checkpoint: run_$kind/model.safetensors (step 6)"

  # The model file: asked in words, one answer line.
  "$TRAIN" --load "$model" --ask "a b c" --threads 1 >answer 2>"$QKV_TMP/out" ||
    { cat answer "$QKV_TMP/out"; fail "--ask on $model"; }
  [ "$(wc -l <answer)" -eq 1 ] || { cat answer; fail "--ask on $model printed $(wc -l <answer) lines"; }
done
