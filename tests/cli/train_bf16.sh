# --precision bf16 trains (the loss falls), says which kernel runs its
# products, and writes the same float32 checkpoint as fp32: every tensor F32,
# loadable and evaluated at fp32, and resumed to train on in bf16 unless
# --precision says otherwise. A wrong value is refused by name.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
expect_fail "$TRAIN" "${TINY[@]}" --steps 3 --precision fp16 --out bad
expect_out "--precision: expected fp32 or bf16, got 'fp16'"

expect_ok "$TRAIN" "${TINY[@]}" --steps 40 --lr 3e-3 --log-every 1 --precision bf16 --out run
expect_out "precision: bf16 matrix products (bfloat16 operands, float32 sums"
grep -qE "on the CPU's AVX512-BF16 \(vdpbf16ps\)|emulated: this CPU \(or this build\) lacks AVX512-BF16" "$QKV_TMP/out" ||
  { cat "$QKV_TMP/out"; fail "the header does not say which kernel runs the bf16 products"; }
# The mean training loss of the first 5 steps and of the last 5 (log.csv: step,loss,...).
read -r first last < <(awk -F, 'NR > 1 { l[NR - 1] = $2; n = NR - 1 }
  END { for (i = 1; i <= 5; i++) { f += l[i]; e += l[n - 5 + i] } printf "%.4f %.4f\n", f / 5, e / 5 }' run/log.csv)
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.9 * f) }' ||
  fail "bf16 training did not learn: mean loss $first over the first 5 steps, $last over the last 5"

# The checkpoint is float32, tensor by tensor.
python3 - run/model.safetensors <<'PY' || fail "the bf16 run's checkpoint is not all float32"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
dtypes = {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}
bad = {k: d for k, d in dtypes.items() if d != "F32"}
assert dtypes and not bad, bad
# ... and says it was trained with bf16 products.
assert header["__metadata__"].get("matmul_precision") == "bf16", header["__metadata__"].keys()
PY
expect_ok "$TRAIN" --load run/model.safetensors --eval-only --threads 1
expect_out "from step 40"
grep -qF "precision: bf16" "$QKV_TMP/out" && fail "an fp32 evaluation says bf16"

# Resumed to train on, the run goes on with the products it was trained with
# (its file says bf16), and says so; --precision fp32 changes that.
cp run/model.safetensors resumed.safetensors
expect_ok "$TRAIN" --load resumed.safetensors --steps 42 --threads 1 --out resumed
expect_out "note: resuming with bf16 products, as resumed.safetensors was trained"
expect_out "precision: bf16 matrix products"
python3 -c "import json,struct,sys; f=open('resumed/model.safetensors','rb'); n=struct.unpack('<Q',f.read(8))[0]; sys.exit(json.loads(f.read(n))['__metadata__'].get('matmul_precision')!='bf16')" ||
  fail "the resumed bf16 run's checkpoint does not say bf16"
cp run/model.safetensors as_fp32.safetensors
expect_ok "$TRAIN" --load as_fp32.safetensors --steps 42 --threads 1 --precision fp32 --out as_fp32
grep -qF "precision: bf16" "$QKV_TMP/out" && fail "--precision fp32 on a resumed bf16 run still says bf16"
grep -qF "note: resuming with bf16" "$QKV_TMP/out" && fail "--precision fp32 was given, yet the note says bf16"
true
