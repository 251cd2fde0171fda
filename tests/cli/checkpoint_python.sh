#!/usr/bin/env bash
# The checkpoint format from outside qkv (docs/checkpoint-format.md): Python's
# standard library alone (tools/qkv_checkpoint.py) reads a training
# checkpoint, writes it back to the very same bytes (which the trainer loads),
# and writes a weights-only model file the trainer answers from; a file whose
# parts disagree is refused, naming the file and the key.
source "$(dirname "$0")/lib.bash"
command -v python3 >/dev/null || { echo "skipped: no python3"; exit 0; }
cd "$QKV_TMP"
export PYTHONPATH="$QKV_SRC/tools${PYTHONPATH:+:$PYTHONPATH}"

expect_ok "$TRAIN" "${TINY[@]}" --steps 3 --out run
ckpt=run/model.safetensors

# (a) Read in Python: a v3 checkpoint whose parts agree.
python3 - "$ckpt" <<'EOF' || fail "$ckpt as read by tools/qkv_checkpoint.py (above)"
import sys
import qkv_checkpoint as qc
path = sys.argv[1]
tensors, md = qc.read(path)
info = qc.model_info(path)
cfg, vocab = info["model_config"], info["vocab"]
def check(ok, what):
    if not ok:
        sys.exit(f"{path}: {what}")
check(md.get("format") == "qkv-train-v3", f"format is {md.get('format')!r}, not 'qkv-train-v3'")
check(info["model_kind"] == "seq2seq", f"model_kind is {info['model_kind']!r}")
check(info["model_prefix"] == "model.", f"model_prefix is {info['model_prefix']!r}")
check(cfg["d_model"] == 16, f"model_config's d_model is {cfg['d_model']!r}, not the 16 of --d-model")
check(vocab is not None and len(vocab) == cfg["src_vocab"], f"vocab {vocab} does not have model_config's src_vocab {cfg['src_vocab']} tokens")
check(vocab[:4] == ["<pad>", "<s>", "</s>", "a"], f"vocab {vocab} is not a task's")
check(md.get("tokenizer", "word") == "word", f"tokenizer {md.get('tokenizer')!r}: a task's symbols are words")
check(tensors["model.src_embed.weight"][0] == [cfg["src_vocab"], 16], "model.src_embed.weight's shape")
check(md.get("step") == "3" and list(tensors["optim.step"][1]) == [3.0], f"step {md.get('step')!r}, optim.step {tensors['optim.step']}")
EOF

# (b) Written back by Python: the same bytes, and the trainer loads them.
python3 - "$ckpt" copy.safetensors <<'EOF' || fail "rewriting $ckpt in Python"
import sys
import qkv_checkpoint as qc
tensors, md = qc.read(sys.argv[1])
qc.write(sys.argv[2], tensors, md)
EOF
expect_ok "$TRAIN" --load copy.safetensors --eval-only
expect_out "held-out exact-sequence accuracy"
cmp "$ckpt" copy.safetensors || fail "Python's rewrite of $ckpt differs from qkv's bytes"

# (c) A weights-only model file written by Python: no optimizer, no prefix,
#     only the model's keys. The trainer answers from it.
python3 - "$ckpt" model_only.safetensors <<'EOF' || fail "writing a model file in Python"
import json, sys
import qkv_checkpoint as qc
tensors, md = qc.read(sys.argv[1])
weights = {name[len("model."):]: t for name, t in tensors.items() if name.startswith("model.")}
keys = {k: md[k] for k in ("model_kind", "model_config", "vocab")}
keys["special_tokens"] = json.dumps({"pad": 0, "bos": 1, "eos": 2})  # a task's vocabulary has no <unk>
keys["tokenizer"] = "word"                                           # its symbols are typed as words
qc.write(sys.argv[2], weights, keys)
assert qc.model_info(sys.argv[2])["model_prefix"] == ""
EOF
"$TRAIN" --load model_only.safetensors --ask "a b c" >answer 2>"$QKV_TMP/out" ||
  { cat answer "$QKV_TMP/out"; fail "--ask on a model file written in Python"; }
[ "$(wc -l < answer)" -eq 1 ] || { cat answer; fail "--ask on a model file printed $(wc -l < answer) lines, not one answer"; }

# (d) Parts that disagree are refused, naming the file and the key.
python3 - "$ckpt" <<'EOF' || fail "writing the disagreeing files in Python"
import json, sys
import qkv_checkpoint as qc
tensors, md = qc.read(sys.argv[1])
qc.write("wrong_count.safetensors", tensors, dict(md, step="4"))  # optim.step holds 3
short = json.loads(md["vocab"])[:-1]                              # a token fewer than model_config's
qc.write("short_list.safetensors", tensors, dict(md, vocab=json.dumps(short)))
EOF
expect_fail "$TRAIN" --load wrong_count.safetensors --eval-only
expect_out "wrong_count.safetensors"
expect_out "step"
expect_fail "$TRAIN" --load short_list.safetensors --eval-only
expect_out "short_list.safetensors"
expect_out "vocab"

# (e) Every family's file is read: an encoder checkpoint (train's own) and a
#     seq2seq one alike, by read() and by the command-line listing; and (f)
#     F64 tensors.
expect_ok "$TRAIN" "${TINY[@]}" --model encoder --steps 1 --out enc
python3 - enc/model.safetensors "$ckpt" <<'PYEOF' || fail "reading every family, F64 (above)"
import sys
import qkv_checkpoint as qc
for path, kind, size_key in zip(sys.argv[1:], ("encoder", "seq2seq"), ("vocab", "src_vocab")):
    tensors, md = qc.read(path)
    info = qc.model_info(path)
    assert info["model_kind"] == kind, (path, info["model_kind"])
    assert len(info["vocab"]) == info["model_config"][size_key], (path, info)
# (f) F64 tensors are read as doubles (array 'd'), to the last bit; F16 is
#     refused by read(), naming the tensor.
import json, struct
def raw(path, entries, body, metadata=None):
    header = dict(entries, **({"__metadata__": metadata} if metadata else {}))
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)
third = 1 / 3
raw("f64.safetensors", {"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}}, struct.pack("<2d", third, -2.5))
tensors, _ = qc.read("f64.safetensors")
shape, values = tensors["w"]
assert shape == [2] and values.typecode == "d" and list(values) == [third, -2.5], (shape, values)
raw("f16.safetensors", {"h": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4)
try:
    qc.read("f16.safetensors")
    sys.exit("an F16 tensor was read as if it were F32 or F64")
except ValueError as e:
    assert "'h' is F16" in str(e) and "F32 and F64" in str(e), e
PYEOF
expect_ok python3 "$QKV_SRC/tools/qkv_checkpoint.py" enc/model.safetensors
expect_out "model_kind: encoder"

# (g) A FIFO is refused before it is opened for a blocking read (no writer
#     ever comes: without the check the reader waits for ever).
mkfifo fifo.safetensors
status=0
timeout 10 python3 "$QKV_SRC/tools/qkv_checkpoint.py" fifo.safetensors >"$QKV_TMP/out" 2>&1 || status=$?
[ "$status" != 124 ] || fail "tools/qkv_checkpoint.py waited on a FIFO"
[ "$status" = 1 ] || { cat "$QKV_TMP/out"; fail "a FIFO: exit status $status, not 1"; }
expect_out "fifo.safetensors: not a regular file"

# (h) Hostile files: each is refused with one line naming the file (and the
#     tensor or key), exit status 1, never a traceback.
python3 - "$ckpt" <<'PYEOF' || fail "the hostile files (above)"
import json, struct, sys
def raw(path, header_bytes, body=b"", length=None):
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes) if length is None else length) + header_bytes + body)
def hdr(obj):
    text = json.dumps(obj).encode()
    return text + b" " * (-len(text) % 8)
good = open(sys.argv[1], "rb").read()
raw("h_truncated.safetensors", good[:len(good) // 2][8:], length=struct.unpack("<Q", good[:8])[0])
open("h_short.safetensors", "wb").write(b"\x05\x00")
raw("h_badjson.safetensors", b'{"a": {"dtype": ')
raw("h_notutf8.safetensors", b'{"\xff": 1}    ')
raw("h_length.safetensors", hdr({}), length=1 << 40)
raw("h_notobject.safetensors", hdr([1, 2]))
raw("h_deep.safetensors", b"[" * 100000 + b"]" * 100000)
t = lambda dtype="F32", shape=(1,), off=(0, 4): {"dtype": dtype, "shape": list(shape), "data_offsets": list(off)}
raw("h_dtype.safetensors", hdr({"w": t(dtype="X\x1b[31m")}), b"\0" * 4)
raw("h_dtype_type.safetensors", hdr({"w": t(dtype=7)}), b"\0" * 4)
raw("h_entry.safetensors", hdr({"w": [1]}), b"\0" * 4)
raw("h_nofield.safetensors", hdr({"w": {"dtype": "F32", "shape": [1]}}), b"\0" * 4)
raw("h_shape.safetensors", hdr({"w": t(shape=("a",))}), b"\0" * 4)
raw("h_range.safetensors", hdr({"w": t(off=(0, 400))}), b"\0" * 4)
raw("h_size.safetensors", hdr({"w": t(off=(0, 8))}), b"\0" * 8)
raw("h_overlap.safetensors", hdr({"a": t(off=(0, 4)), "b": t(off=(0, 4))}), b"\0" * 8)
raw("h_gap.safetensors", hdr({"a": t(off=(4, 8))}), b"\0" * 8)
raw("h_tail.safetensors", hdr({"a": t()}), b"\0" * 8)
raw("h_dupname.safetensors", b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4)
raw("h_metadata.safetensors", hdr({"__metadata__": {"k": 5}}))
md = lambda **kv: hdr({"w": t(), "__metadata__": kv})
raw("h_dupkey.safetensors", md(model_kind="gpt", model_config='{"vocab": 3, "vocab": 4}'), b"\0" * 4)
raw("h_config.safetensors", md(model_kind="gpt", model_config="{"), b"\0" * 4)
raw("h_kind.safetensors", md(model_kind="x" * 100000, model_config="{}"), b"\0" * 4)
raw("h_vocab.safetensors", md(model_kind="gpt", model_config='{"vocab": 3}', vocab='[1, 2, 3]'), b"\0" * 4)
raw("h_special.safetensors", md(model_kind="gpt", model_config='{"vocab": 1}', vocab='["a"]', special_tokens='[]'), b"\0" * 4)
# The attention keys: kv_heads not dividing heads, rope_base out of range, a
# gpt with rotary positions and a position table.
gpt = lambda **kv: json.dumps(dict({"vocab": 1, "heads": 4, "activation": "gelu"}, **kv))
raw("h_kvheads.safetensors", md(model_kind="gpt", model_config=gpt(kv_heads=3)), b"\0" * 4)
raw("h_kvheads_type.safetensors", md(model_kind="gpt", model_config=gpt(kv_heads=2.0)), b"\0" * 4)
raw("h_ropebase.safetensors", md(model_kind="gpt", model_config=gpt(rope_base=0)), b"\0" * 4)
raw("h_ropebase_type.safetensors", md(model_kind="gpt", model_config=gpt(rope_base="10000")), b"\0" * 4)
raw("h_ropetable.safetensors", hdr({"pos_embed.weight": t(), "__metadata__": {"model_kind": "gpt", "model_config": gpt(rope_base=10000.0)}}), b"\0" * 4)
import contextlib, glob, io
import qkv_checkpoint as qc
bad = []
for path in sorted(glob.glob("h_*.safetensors")):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = qc.cli(["qkv_checkpoint.py", path])
    text = err.getvalue()
    if (status != 1 or text.count("\n") != 1 or not text.startswith(f"error: {path}: ")
            or "Traceback" in text or len(text.encode()) > 300
            or any(ord(c) < 0x20 and c != "\n" or ord(c) == 0x7f for c in text)):
        bad.append(f"{path}: status {status}, {text[:300]!r}")
    try:  # the library's callers catch one type
        qc.read(path)
        qc.model_info(path)
        bad.append(f"{path}: read() and model_info() accepted it")
    except ValueError:
        pass
if bad:
    sys.exit("\n".join(bad))
PYEOF
# The command line itself: one line, status 1.
status=0
python3 "$QKV_SRC/tools/qkv_checkpoint.py" h_dtype.safetensors >"$QKV_TMP/out" 2>&1 || status=$?
[ "$status" = 1 ] && [ "$(wc -l < "$QKV_TMP/out")" = 1 ] || { cat "$QKV_TMP/out"; fail "h_dtype: status $status"; }
expect_out "error: h_dtype.safetensors: tensor 'w': unknown dtype 'X\x1b[31m'"
# The attention keys' refusals name the key.
for f in kvheads:kv_heads ropebase:rope_base ropetable:pos_embed.weight; do
  expect_fail python3 "$QKV_SRC/tools/qkv_checkpoint.py" "h_${f%%:*}.safetensors"
  expect_out "'${f#*:}'"
done

# (i) The attention keys kv_heads and rope_base (a gpt with grouped-query
#     attention and rotary positions: no pos_embed) are read and listed, and
#     a file without them lists their defaults.
expect_ok "$TRAIN" "${TINY[@]}" --model gpt --positions rope --kv-heads 1 --steps 1 --out rope
expect_ok python3 "$QKV_SRC/tools/qkv_checkpoint.py" rope/model.safetensors
expect_out "attention: 2 heads, 1 key/value heads, rotary positions (rope_base 10000"
! grep -q "pos_embed" "$QKV_TMP/out" || { cat "$QKV_TMP/out"; fail "a gpt with rope lists a position table"; }
expect_ok python3 "$QKV_SRC/tools/qkv_checkpoint.py" "$ckpt"
expect_out "attention: 2 heads, 2 key/value heads, no rotation"
