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
