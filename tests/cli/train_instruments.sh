# train --instruments N (docs/instruments.md): the records, the pictures and
# index.html in the run's folder; the diagnosis's rules on tiny runs made to
# show them and on one made not to; the instruments program redrawing a
# finished run; a bad value refused naming the flag.
. "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
INS="$QKV_BIN/instruments"

# A healthy run: 8 watched steps, a final held-out line, every picture, no rule.
expect_ok "$TRAIN" --task reverse "${TINY[@]}" --steps 40 --instruments 5 --out ok
expect_out "diagnosis (--instruments 5, docs/instruments.md): no rule fired"
[ "$(grep -c '"params"' ok/instruments.jsonl)" = 8 ] || fail "expected 8 watched steps"
grep -q '"heldout_loss"' ok/instruments.jsonl || fail "no held-out line"
for f in update_ratio.svg grad_norm.svg activations.svg entropy.svg index.html; do
  [ -s "ok/$f" ] || fail "ok/$f missing"
done
for f in loss.svg attention.svg update_ratio.svg entropy.svg; do
  grep -q "src='$f'" ok/index.html || fail "index.html does not show $f"
done
python3 - ok/instruments.jsonl <<'PY' || fail "a record lacks a key"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "params" not in r: continue
    assert all({"name", "grad_norm", "update_ratio", "dims"} <= p.keys() for p in r["params"])
    kinds = {l["kind"] for l in r["layers"]}
    assert kinds == {"ffn", "attention"}, kinds
    for l in r["layers"]:
        if l["kind"] == "attention": assert len(l["entropy"]) == 2 and l["keys"] >= 2
        else: assert 0 <= l["dead"] <= 1 and sum(l["hist"]["counts"]) > 0
PY

# On demand for a finished run: the pictures come back, exit 0 (no rule).
rm ok/*.svg ok/index.html
expect_ok "$INS" ok
expect_out "no rule fired"
[ -s ok/update_ratio.svg ] && [ -s ok/index.html ] || fail "instruments did not redraw"

# Rule 1 (and rules 2, 3): a learning rate ramped to 3 with no clipping.
expect_ok "$TRAIN" --task reverse "${TINY[@]}" --steps 30 --warmup 60 --lr 3 --clip 0 \
  --schedule constant --instruments 3 --out hot
expect_out "rule 1: "
expect_out "the learning rate is too high for it"
"$INS" hot >"$QKV_TMP/out" 2>&1 && fail "instruments exits 0 on a run with findings"
expect_out "rule 1: "

# Rule 4: ramped to 30, the run diverges (exit 3) after its gradient norm grew.
set +e
"$TRAIN" --task reverse "${TINY[@]}" --steps 60 --warmup 60 --lr 30 --clip 0 \
  --schedule constant --instruments 1 --out boom >"$QKV_TMP/out" 2>&1
rc=$?
set -e
[ "$rc" = 3 ] || { cat "$QKV_TMP/out"; fail "expected exit 3 (diverged), got $rc"; }
expect_out "rule 4: gradient norm grew from"
expect_out "before the divergence at step"
grep -q '"diverged":true' boom/instruments.jsonl || fail "no divergence line"
# ... and the healthy run shows neither rule 1 nor rule 4 (checked above: no rule fired).

expect_fail "$TRAIN" --task reverse "${TINY[@]}" --steps 4 --instruments -1
expect_out "--instruments: must be >= 0"
expect_fail "$TRAIN" --load ok/model.safetensors --eval-only --instruments 5
expect_out "error: --instruments: records a training run, not --eval-only, --ask or --explain"
# A picture's path that cannot be written is refused before training.
mkdir -p blocked/index.html
expect_fail "$TRAIN" --task reverse "${TINY[@]}" --steps 4 --instruments 2 --out blocked
expect_out "blocked/index.html"
[ ! -e blocked/model.safetensors ] || fail "a refused run trained"

# A run resumed from an earlier checkpoint makes its later steps again: their
# old lines go, and every step is recorded once.
expect_ok "$TRAIN" --task reverse "${TINY[@]}" --steps 10 --instruments 5 --out res
cp res/model.safetensors step10.safetensors
expect_ok "$TRAIN" --load res/model.safetensors --steps 20 --instruments 5 --out res
cp step10.safetensors res/model.safetensors
expect_ok "$TRAIN" --load res/model.safetensors --steps 20 --instruments 5 --out res
python3 - res/instruments.jsonl <<'PY' || fail "a step recorded twice after the resume"
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]) if '"params"' in l]
assert steps == [5, 10, 15, 20], steps
PY
