#!/usr/bin/env bash
# A mixture of experts (--experts, nn/moe.h): a gpt and a seq2seq with
# experts train a few steps and the loss falls; the header says the active
# parameters per token, the report each expert's share and the drops, and
# experts.svg is in the run's folder; the file loads from another folder
# with --eval-only; the Python reader reads the keys; and bad input is
# refused in one line before training.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"

# (a) gpt, 4 experts, k 1 (Switch): the loss falls, the header and report say the experts.
expect_ok "$TRAIN" --model gpt "${TINY[@]}" --task reverse --experts 4 --steps 60 --lr 3e-3 --out gpt
expect_out "experts: 4 per FFN, 1 a token, capacity factor 1.25, aux loss 0.01;"
expect_out "parameters active per token"
expect_out "experts over training: share of the kept assignments 0 "
expect_out "assignments dropped over capacity"
[ -s gpt/experts.svg ] || fail "no gpt/experts.svg"
grep -q "expert 3" gpt/experts.svg || fail "experts.svg does not name expert 3"
first=$(sed -n 2p gpt/log.csv | cut -d, -f2)
last=$(tail -n 1 gpt/log.csv | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.2) }' ||
  fail "gpt with experts: loss went from $first to $last in 60 steps (want a fall of > 0.2)"
mkdir elsewhere
(cd elsewhere && "$TRAIN" --load ../gpt/model.safetensors --eval-only >"$QKV_TMP/out" 2>&1) ||
  { cat "$QKV_TMP/out"; fail "--load --eval-only from another folder"; }
expect_out "experts: 4 per FFN, 1 a token"

# The explorer page of the gpt with experts: the router's probabilities and
# choices (the gates) on its nodes, every gradient checked by finite differences.
expect_ok "$TRAIN" --load gpt/model.safetensors --explain "a b c" --html moe.html
expect_out ", 0 fail,"
grep -q '"moe_router"' moe.html || fail "moe.html has no moe_router node"
grep -q '"gates"' moe.html || fail "moe.html does not show the router's choices (gates)"
# (b) seq2seq, 4 experts, k 2, swiglu experts: trains, loads, evaluates.
expect_ok "$TRAIN" --model seq2seq "${TINY[@]}" --experts 4 --experts-per-token 2 \
  --capacity-factor 2 --aux-loss 0.05 --activation swiglu --steps 60 --lr 3e-3 --out s2s
expect_out "experts: 4 per FFN, 2 a token, capacity factor 2.00, aux loss 0.05;"
first=$(sed -n 2p s2s/log.csv | cut -d, -f2)
last=$(tail -n 1 s2s/log.csv | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.2) }' ||
  fail "seq2seq with experts: loss went from $first to $last in 60 steps (want a fall of > 0.2)"
(cd elsewhere && "$TRAIN" --load ../s2s/model.safetensors --eval-only >"$QKV_TMP/out" 2>&1) ||
  { cat "$QKV_TMP/out"; fail "seq2seq --load --eval-only from another folder"; }
expect_out "held-out exact-sequence accuracy"

if command -v python3 >/dev/null; then
  expect_ok python3 -c "
import sys; sys.path.insert(0, '$QKV_SRC/tools'); import qkv_checkpoint as q
i = q.model_info('s2s/model.safetensors'); print(i['experts'])"
  expect_out "'experts': 4, 'experts_per_token': 2, 'capacity_factor': 2.0, 'aux_loss': 0.05"
fi

# (c) Bad input: one line each, before training.
one_line() {
  expect_fail "$@"
  [ "$(wc -l < "$QKV_TMP/out")" = 1 ] || { cat "$QKV_TMP/out"; fail "not one line: $*"; }
}
GPT=(--model gpt "${TINY[@]}" --task reverse --steps 1 --no-save)
one_line "$TRAIN" "${GPT[@]}" --experts 4 --experts-per-token 5
expect_out "error: --experts-per-token: must be in 1..--experts 4, got 5"
one_line "$TRAIN" "${GPT[@]}" --experts 1
expect_out "error: --experts: must be in 2..1024 (0: a dense FFN), got 1"
one_line "$TRAIN" "${GPT[@]}" --experts 4 --capacity-factor 0
expect_out "error: --capacity-factor: must be in (0, 1024], got 0"
one_line "$TRAIN" "${GPT[@]}" --experts 4 --capacity-factor -1
expect_out "error: --capacity-factor: must be in (0, 1024], got -1"
one_line "$TRAIN" "${GPT[@]}" --experts-per-token 2
expect_out "error: --experts-per-token: sets the mixture of experts; give --experts E too"
one_line "$TRAIN" "${GPT[@]}" --aux-loss 0.1
expect_out "error: --aux-loss: sets the mixture of experts; give --experts E too"
# Recomputing would run the first forward without a graph: refused.
one_line "$TRAIN" "${GPT[@]}" --experts 4 --recompute ffn
expect_out "error: --recompute: recomputing in backward does not take --experts"
echo "experts: gpt ($first -> $last) and seq2seq train, load elsewhere, bad input refused"
