#!/usr/bin/env bash
# The llama block as flags (--norm rms, --activation swiglu, --no-bias) and
# as one preset (--preset llama): a tiny gpt trains with the preset and its
# loss falls, its file holds the keys and answers the same from another
# folder with nothing but the file; flags given explicitly win over the
# preset, before or after it; every family trains with the three flags
# (Post-LN's residual sum fused into the RMSNorm); the Python reader reads
# the keys; and a wrong norm, activation or preset, a preset for a family it
# does not fit, or a preset beside --load is refused in one line.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
GPT=(--model gpt "${TINY[@]}" --task reverse)

# (a) --preset llama trains: the model line says the block, the loss falls.
expect_ok "$TRAIN" "${GPT[@]}" --preset llama --steps 60 --lr 3e-3 --out llama
expect_out "model: gpt, d_model 16, 2 heads, 1 key/value head, 1 layers, d_ff 32, Pre-LN (rms), swiglu (hidden 24), no biases, rope positions, tied,"
first=$(sed -n 2p llama/log.csv | cut -d, -f2)
last=$(tail -n 1 llama/log.csv | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.2) }' ||
  fail "--preset llama: loss went from $first to $last in 60 steps (want a fall of > 0.2)"
# The file holds the keys; --ask from another folder answers as it did here.
expect_ok "$TRAIN" --load llama/model.safetensors --ask "a b c"
here=$(cat "$QKV_TMP/out")
mkdir elsewhere
(cd elsewhere && "$TRAIN" --load ../llama/model.safetensors --ask "a b c" >"$QKV_TMP/out" 2>&1) ||
  { cat "$QKV_TMP/out"; fail "--ask from another folder"; }
[ "$(cat "$QKV_TMP/out")" = "$here" ] || { cat "$QKV_TMP/out"; fail "--ask from another folder answered otherwise than '$here'"; }

# (b) The flags given win over the preset, on either side of it.
for order in "--preset llama --norm layer" "--norm layer --preset llama"; do
  # shellcheck disable=SC2086
  expect_ok "$TRAIN" "${GPT[@]}" $order --steps 2 --no-save --out order
  expect_out "Pre-LN, swiglu (hidden 24), no biases, rope positions, tied,"
done
expect_ok "$TRAIN" "${GPT[@]}" --activation gelu --preset llama --steps 2 --no-save --out order
expect_out "Pre-LN (rms), gelu, no biases, rope positions, tied,"
# ... the positions and key/value heads too (the preset's K = H/2 is a rule on --heads).
expect_ok "$TRAIN" "${GPT[@]}" --preset llama --positions learned --kv-heads 2 --steps 2 --no-save --out order
expect_out "model: gpt, d_model 16, 2 heads, 2 key/value heads, 1 layers, d_ff 32, Pre-LN (rms), swiglu (hidden 24), no biases, learned positions, tied,"
expect_ok "$TRAIN" "${GPT[@]}" --preset llama --heads 1 --steps 2 --no-save --out order
expect_out "model: gpt, d_model 16, 1 heads, 1 layers,"

# (c) Every family with the three flags, in its default placement (seq2seq
#     and encoder Post-LN: add_rms_norm; gpt Pre-LN) and seq2seq Pre-LN too.
for fam in "--model seq2seq" "--model seq2seq --pre-ln" "--model encoder" "--model gpt"; do
  # shellcheck disable=SC2086
  expect_ok "$TRAIN" $fam "${TINY[@]}" --norm rms --activation swiglu --no-bias --steps 3 --out "fam"
  expect_out ", swiglu (hidden 24), no biases,"
  expect_ok "$TRAIN" --load fam/model.safetensors --eval-only
  expect_out "held-out exact-sequence accuracy"
done

# (d) The Python reader reads the keys (and their defaults in an older file).
if command -v python3 >/dev/null; then
  expect_ok python3 "$QKV_SRC/tools/qkv_checkpoint.py" llama/model.safetensors
  expect_out "block: rms norm, swiglu (hidden 24), no biases"
  expect_ok python3 "$QKV_SRC/tools/qkv_checkpoint.py" fam/model.safetensors
  expect_out "block: rms norm, swiglu (hidden 24), no biases"
fi

# (d2) Rotary positions are a gpt's: a seq2seq or encoder file given
#      rope_base is refused naming the key, by the trainer as by the library
#      (tests/test_model_file.cpp) and the Python reader.
if command -v python3 >/dev/null; then
  for fam in seq2seq encoder; do
    expect_ok "$TRAIN" --model "$fam" "${TINY[@]}" --steps 1 --out "rope_$fam"
    python3 - "rope_$fam/model.safetensors" <<'EOF'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
md = header["__metadata__"]
md["model_config"] = json.dumps(dict(json.loads(md["model_config"]), rope_base=10000))
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
EOF
    expect_fail "$TRAIN" --load "rope_$fam/model.safetensors" --eval-only
    expect_out "rope_$fam/model.safetensors: metadata 'model_config': key 'rope_base': a"
    expect_out "; rotary positions are a gpt's (leave the key out)"
    expect_fail python3 "$QKV_SRC/tools/qkv_checkpoint.py" "rope_$fam/model.safetensors"
    expect_out "key 'rope_base' is 10000: a"
  done
fi

# (e) Bad input: one line each, naming the flag and the table's names.
one_line() {
  expect_fail "$@"
  [ "$(wc -l < "$QKV_TMP/out")" = 1 ] || { cat "$QKV_TMP/out"; fail "not one line: $*"; }
}
one_line "$TRAIN" "${GPT[@]}" --norm batch --steps 1
[ "$(cat "$QKV_TMP/out")" = "error: --norm: expected layer or rms, got 'batch'" ] || { cat "$QKV_TMP/out"; fail "--norm batch"; }
one_line "$TRAIN" "${GPT[@]}" --activation swish --steps 1
[ "$(cat "$QKV_TMP/out")" = "error: --activation: expected relu, gelu or swiglu, got 'swish'" ] || { cat "$QKV_TMP/out"; fail "--activation swish"; }
one_line "$TRAIN" "${GPT[@]}" --preset gpt4 --steps 1
[ "$(cat "$QKV_TMP/out")" = "error: --preset: expected llama or t5, got 'gpt4'" ] || { cat "$QKV_TMP/out"; fail "--preset gpt4"; }
for fam in seq2seq encoder; do
  one_line "$TRAIN" --model "$fam" "${TINY[@]}" --preset llama --steps 1
  [ "$(cat "$QKV_TMP/out")" = "error: --preset llama: fits language models (--model gpt), not --model $fam" ] ||
    { cat "$QKV_TMP/out"; fail "--preset llama for $fam"; }
done
one_line "$TRAIN" --load llama/model.safetensors --preset llama --steps 70
[ "$(cat "$QKV_TMP/out")" = "error: --preset: sets a new run's architecture; the checkpoint llama/model.safetensors holds its own (leave --preset out)" ] ||
  { cat "$QKV_TMP/out"; fail "--preset with --load"; }
# RoPE and grouped-query attention: K must divide H, rope needs an even head
# size, the gpt family and a softmax kernel.
one_line "$TRAIN" "${GPT[@]}" --kv-heads 3 --steps 1
[ "$(cat "$QKV_TMP/out")" = "error: --kv-heads: must divide --heads 2 (0: every head), got 3" ] || { cat "$QKV_TMP/out"; fail "--kv-heads 3"; }
one_line "$TRAIN" "${GPT[@]}" --positions rope --d-k 3 --steps 1
[ "$(cat "$QKV_TMP/out")" = "error: --positions: rope turns pairs of a head's d_k numbers, and d_k = 3 is odd (--d-model / --heads, or --d-k)" ] || { cat "$QKV_TMP/out"; fail "rope, odd d_k"; }
one_line "$TRAIN" "${TINY[@]}" --positions rope --steps 1
[ "$(cat "$QKV_TMP/out")" = "error: --positions: the seq2seq model takes sinusoidal or learned positions (added to its embeddings) or T5's relative bias (relative; rotary positions are the gpt model's), not 'rope'" ] || { cat "$QKV_TMP/out"; fail "rope for seq2seq"; }
one_line "$TRAIN" "${GPT[@]}" --preset llama --attention linear --steps 1
[ "$(cat "$QKV_TMP/out")" = "error: --attention: the linear kernel takes neither --positions rope nor --kv-heads (standard, memory-efficient or auto do)" ] || { cat "$QKV_TMP/out"; fail "rope with linear attention"; }
# Each alone is named alone (the run has no other to leave out).
one_line "$TRAIN" "${GPT[@]}" --positions rope --attention linear --steps 1
[ "$(cat "$QKV_TMP/out")" = "error: --attention: the linear kernel takes no --positions rope (standard, memory-efficient or auto do)" ] || { cat "$QKV_TMP/out"; fail "rope alone with linear attention"; }
one_line "$TRAIN" "${GPT[@]}" --kv-heads 1 --attention sparse --steps 1
[ "$(cat "$QKV_TMP/out")" = "error: --attention: the sparse kernel takes no --kv-heads (standard, memory-efficient or auto do)" ] || { cat "$QKV_TMP/out"; fail "--kv-heads alone with sparse attention"; }
echo "llama block: preset trains ($first -> $last), flags win, 3 families, bad input refused"
