#!/usr/bin/env bash
# run_all: alone (its tools run under a 5 s timeout)
# The Python tools on hostile input (issue 49, item 7): each case is refused
# in one line on stderr naming the flag, or the file and the key, with a
# non-zero status, nothing on stdout, no traceback, within 5 s (a FIFO must
# not block), values quoted briefly.
#
#   tools/bert_packages.py  a garbage, huge-header or train_config-less
#                           pre-trained file, a directory where a file goes,
#                           --sizes abc, --seeds x, --finetune-epochs nan,
#                           a FIFO among its outputs; and --pretrain-steps
#                           below 400 runs (its warm-up follows the steps).
#   tools/qkv_checkpoint.py files qkv's loader refuses: a gpt whose kv_heads
#                           does not fit its tensors, experts 1e9, a 'labels'
#                           key in a family that does not classify, ...
#
# Every file is written here in Python (from the committed format fixtures);
# train and bow_classify are stand-ins that record their command lines, so
# nothing is trained and the script takes a second or two.
# QKV_TOOLS=DIR runs the tools of DIR instead of tools/ (to see this test
# fail on older tools).
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || { echo "skipped: no python3"; exit 0; }
TOOLS=$(cd "${QKV_TOOLS:-$QKV_SRC/tools}" && pwd)
FIX="$QKV_SRC/tests/fixtures"
cd "$QKV_TMP"

failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }

# refused NAME TEXT... -- CMD...: CMD exits non-zero within 5 s with one line
# on stderr (at most 300 bytes, no traceback) holding each TEXT, and prints
# nothing on stdout.
refused() {
  local name=$1 want=()
  shift
  while [ "$1" != -- ]; do want+=("$1"); shift; done
  shift
  local status=0
  timeout 5 "$@" >stdout 2>stderr </dev/null || status=$?
  local why=""
  if [ "$status" = 124 ]; then why="still running after 5 s (blocked?)"
  elif [ "$status" = 0 ]; then why="exit status 0"
  elif grep -q Traceback stderr; then why="a traceback"
  elif [ "$(wc -l < stderr)" != 1 ]; then why="$(wc -l < stderr) lines on stderr, not one"
  elif [ -s stdout ]; then why="output on stdout: $(head -c 200 stdout)"
  elif [ "$(wc -c < stderr)" -gt 300 ]; then why="a line of $(wc -c < stderr) bytes"
  else
    for w in "${want[@]}"; do grep -qF -- "$w" stderr || { why="the line lacks \"$w\""; break; }; done
  fi
  if [ -n "$why" ]; then
    bad "$name: $why"
    { head -c 600 stderr; echo; } | sed 's/^/        /'
  else
    echo "ok    $name: $(cat stderr)"
  fi
}

# ---- tools/bert_packages.py -------------------------------------------------------------

# Stand-ins for train and bow_classify: each records its command line; train
# refuses a warm-up longer than the steps as train's cosine schedule does.
mkdir bin data
cat > bin/train <<EOF
#!$PY
import os, sys
a = sys.argv[1:]
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls"), "a").write(" ".join(a) + "\n")
v = lambda f: a[a.index(f) + 1] if f in a else None
if v("--warmup") is not None and int(v("--warmup")) > int(v("--steps")):
    sys.exit(f"error: --warmup: {v('--warmup')} is more than --steps {v('--steps')} (the cosine schedule warms up within --steps)")
print("held-out accuracy: 40.0%" if "--eval-only" in a else
      "held-out masked-token accuracy: 12.5%" if v("--objective") == "mlm" else "trained")
EOF
cat > bin/bow_classify <<EOF
#!$PY
print("test accuracy 0.3\nmajority class 'x' 0.1")
EOF
chmod +x bin/train bin/bow_classify
echo "a description of a package" > data/pretrain.txt
for i in $(seq 1 20); do printf 'package number %d\tsection%d\n' "$i" $((i % 3)); done > data/train.tsv
cp data/train.tsv data/valid.tsv
cp data/train.tsv data/test.tsv

# The pre-trained files (OUT/mlm/model.safetensors) of each case.
"$PY" - <<'EOF'
import json, os, struct
def write(out, header_bytes, length=None):
    os.makedirs(f"{out}/mlm")
    with open(f"{out}/mlm/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes) if length is None else length) + header_bytes)
def header(md):
    text = json.dumps({"__metadata__": md}).encode()
    return text + b" " * (-len(text) % 8)
write("garbage", b"\x93\xa7 not a safetensors header at all \xff\xfe" * 4, length=0xFFFFFFFF0000)
write("huge", header({}), length=1 << 62)
write("notrain", header({"model_kind": "bert", "model_config": "{}", "format": "qkv-train-v3"}))
os.makedirs("directory/mlm/model.safetensors")
os.makedirs("fifo_in/mlm")
os.mkfifo("fifo_in/mlm/model.safetensors")
os.makedirs("fifo_log")
os.mkfifo("fifo_log/mlm.log")
os.makedirs("fifo_results")
os.mkfifo("fifo_results/results.json")
os.mkfifo("fifo_out")
os.makedirs("data_dir/train.tsv")
for name in ("pretrain.txt", "valid.tsv", "test.tsv"):
    os.symlink(os.path.abspath(f"data/{name}"), f"data_dir/{name}")
EOF

bp=("$PY" "$TOOLS/bert_packages.py" --bin bin --data data --sizes 5 --seeds 1)
refused "a garbage pre-trained file" garbage/mlm/model.safetensors "header length" -- "${bp[@]}" --out garbage
refused "a pre-trained file with a huge header" huge/mlm/model.safetensors "header length" -- "${bp[@]}" --out huge
refused "a pre-trained file without train_config" notrain/mlm/model.safetensors "'train_config'" -- "${bp[@]}" --out notrain
refused "a directory as the pre-trained file" directory/mlm/model.safetensors "not a regular file" -- "${bp[@]}" --out directory
refused "a directory as --data's train.tsv" data_dir/train.tsv "directory" -- "$PY" "$TOOLS/bert_packages.py" --bin bin --data data_dir --sizes 5 --seeds 1 --out dd
refused "--sizes abc" "--sizes 'abc'" "whole numbers" -- "${bp[@]}" --out o --sizes abc
refused "--seeds x" "--seeds 'x'" "whole numbers" -- "${bp[@]}" --out o --seeds x
refused "--finetune-epochs nan" "--finetune-epochs 'nan'" "finite" -- "${bp[@]}" --out o --finetune-epochs nan
refused "--finetune-epochs inf" "--finetune-epochs 'inf'" "finite" -- "${bp[@]}" --out o --finetune-epochs inf
refused "--finetune-epochs 1e308" "--finetune-epochs '1e308'" "10000" -- "${bp[@]}" --out o --finetune-epochs 1e308
refused "--pretrain-steps 0" "--pretrain-steps '0'" -- "${bp[@]}" --out o --pretrain-steps 0
refused "--seeds of 2,000 characters" "--seeds 'xxxxxxxx" "(2000 characters)" -- "${bp[@]}" --out o --seeds "$(printf 'x%.0s' $(seq 2000))"
refused "a FIFO as the pre-trained file" fifo_in/mlm/model.safetensors "not a regular file" -- "${bp[@]}" --out fifo_in
refused "a FIFO as mlm.log" fifo_log/mlm.log "FIFO" -- "${bp[@]}" --out fifo_log
refused "a FIFO as results.json" fifo_results/results.json "FIFO" -- "${bp[@]}" --out fifo_results
refused "a FIFO as --out" "--out fifo_out" "FIFO" -- "${bp[@]}" --out fifo_out
[ -p fifo_log/mlm.log ] && [ -p fifo_results/results.json ] || bad "a FIFO was replaced"

# --pretrain-steps below the warm-up of 400: the warm-up follows the steps
# (a tenth of them), the run goes through, and --help says so.
status=0
timeout 20 "${bp[@]}" --out short --pretrain-steps 50 >out 2>&1 || status=$?
if [ "$status" != 0 ]; then bad "--pretrain-steps 50: exit status $status"; tail -3 out | sed 's/^/        /'
elif ! grep -q -- "--objective mlm .* --steps 50 --warmup 5 " bin/calls; then bad "--pretrain-steps 50: pre-trained without --warmup 5"
elif [ ! -s short/results.json ]; then bad "--pretrain-steps 50: no short/results.json"
else echo "ok    --pretrain-steps 50: pre-trains with --steps 50 --warmup 5"
fi
"$PY" "$TOOLS/bert_packages.py" --help >out 2>&1 || bad "bert_packages.py --help: status $?"
help=$(tr -s ' \n' ' ' < out)
[[ $help == *"warm-up is min(400, steps // 10)"* ]] ||
  bad "bert_packages.py --help does not say the warm-up follows --pretrain-steps"

# ---- tools/qkv_checkpoint.py -------------------------------------------------------------

# Files edited from the format fixtures (each loads in qkv): one fault each.
"$PY" - "$FIX" <<'EOF'
import json, struct, sys
fix = sys.argv[1]
def edit(src, dst, config=None, metadata=None, tensor=None, nan=None):
    data = open(f"{fix}/format_{src}.safetensors", "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header, body = json.loads(data[8:8 + n]), bytearray(data[8 + n:])
    md = header["__metadata__"]
    if config:
        md["model_config"] = json.dumps(dict(json.loads(md["model_config"]), **config))
    md.update(metadata or {})
    if tensor:  # one more tensor of one number
        header[tensor] = {"dtype": "F32", "shape": [1], "data_offsets": [len(body), len(body) + 4]}
        body += b"\0" * 4
    if nan:  # the first number of a tensor
        begin = header[nan]["data_offsets"][0]
        body[begin:begin + 4] = struct.pack("<f", float("nan"))
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(text)) + text + bytes(body))
labels = {"labels": json.dumps(["x", "y"])}
moe = {"experts": 1000000000, "experts_per_token": 1, "capacity_factor": 1.0, "aux_loss": 0.0}
edit("gpt_gqa_rope", "kv_heads.safetensors", config={"kv_heads": 4})
edit("gpt", "experts.safetensors", config=moe)
edit("gpt", "labels_gpt.safetensors", metadata=labels)
edit("seq2seq", "labels_seq2seq.safetensors", metadata=labels)
edit("encoder", "labels_encoder.safetensors", metadata=labels)
edit("bert_mlm", "labels_mlm.safetensors", metadata=labels)
edit("bert_mlm", "classes_mlm.safetensors", config={"classes": 3}, metadata=labels)
edit("gpt", "extra.safetensors", tensor="stray.weight")
edit("gpt", "nan.safetensors", nan="tok_embed.weight")
edit("gpt", "dropout.safetensors", config={"dropout": "0.1"})
EOF
qc=("$PY" "$TOOLS/qkv_checkpoint.py")
refused "a gpt whose kv_heads does not fit its tensors" "error: kv_heads.safetensors: " "'kv_heads'" -- "${qc[@]}" kv_heads.safetensors
refused "experts 1000000000" "error: experts.safetensors: " "'experts'" -- "${qc[@]}" experts.safetensors
refused "labels in a gpt" "error: labels_gpt.safetensors: " "'labels'" -- "${qc[@]}" labels_gpt.safetensors
refused "labels in a seq2seq" "error: labels_seq2seq.safetensors: " "'labels'" -- "${qc[@]}" labels_seq2seq.safetensors
refused "labels in an encoder" "error: labels_encoder.safetensors: " "'labels'" -- "${qc[@]}" labels_encoder.safetensors
refused "labels in a bert mlm" "error: labels_mlm.safetensors: " "'labels'" -- "${qc[@]}" labels_mlm.safetensors
refused "labels in a bert mlm with classes" "error: classes_mlm.safetensors: " "'labels'" -- "${qc[@]}" classes_mlm.safetensors
refused "a tensor the model does not have" "error: extra.safetensors: " "'stray.weight'" -- "${qc[@]}" extra.safetensors
refused "a NaN weight" "error: nan.safetensors: " "'tok_embed.weight'" "nan" -- "${qc[@]}" nan.safetensors
refused "a config value of the wrong type" "error: dropout.safetensors: " "'dropout'" -- "${qc[@]}" dropout.safetensors
# The fixtures themselves are read (the checks refuse no good file).
for f in gpt gpt_gqa_rope seq2seq encoder bert_mlm bert_classify; do
  "${qc[@]}" "$FIX/format_$f.safetensors" >out 2>&1 || { bad "format_$f.safetensors refused"; tail -1 out; }
done
# --help says what it checks and what it leaves to qkv.
"${qc[@]}" --help >out 2>&1 || bad "qkv_checkpoint.py --help: status $?"
grep -q "Not checked here" out || bad "qkv_checkpoint.py --help does not say what it does not check"

[ "$failures" = 0 ] || { echo "$failures case(s) failed"; exit 1; }
exit 0
