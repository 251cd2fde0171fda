# --detect-anomaly: a checkpoint with one NaN weight is refused on load, loads
# with --allow-nonfinite for inspection, and the anomaly check then names the
# first op that made a NaN and the module it sits in. A healthy run passes it.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
expect_ok "$TRAIN" "${TINY[@]}" --steps 5 --out run --detect-anomaly
expect_ok "$TRAIN" --load run/model.safetensors --eval-only --detect-anomaly
expect_out "anomaly check (one forward and backward pass on held-out data): no NaN or Inf"

# Poison one float of decoder.layers.0.ffn.linear1.weight in a copy of the file.
cp run/model.safetensors nan.safetensors
name=model.decoder.layers.0.ffn.linear1.weight
header_len=$(od -An -t u8 -N8 nan.safetensors | tr -d ' ')
begin=$(head -c $((8 + header_len)) nan.safetensors | grep -ao "\"$name\":{[^}]*}" | sed 's/.*"data_offsets":\[\([0-9]*\),.*/\1/')
[ -n "$begin" ] || fail "no $name in the checkpoint"
printf '\x00\x00\xc0\x7f' | dd of=nan.safetensors bs=1 seek=$((8 + header_len + begin + 4 * 5)) conv=notrunc status=none

expect_fail "$TRAIN" --load nan.safetensors --eval-only
expect_out "tensor '$name' holds nan"
expect_fail "$TRAIN" --load nan.safetensors --eval-only --allow-nonfinite --detect-anomaly
expect_out "detect_anomaly"
expect_out "decoder.layers.0.ffn"
expect_fail "$TRAIN" --load nan.safetensors --steps 10 --allow-nonfinite
expect_out "--allow-nonfinite: only with --eval-only or --ask"
