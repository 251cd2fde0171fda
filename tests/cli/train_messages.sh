#!/usr/bin/env bash
# Messages quote user text by one rule (qkv::brief, core/error.h): about 60
# bytes, then "... (N bytes)"; control bytes and what is not UTF-8 as \xNN.
# A 100 KB value with control bytes, given to every string flag of train and
# step_through (and written into a checkpoint's settings), gives one short
# line with no raw control byte. Then the edges of reading a run back: a
# symlink loop, --min-lr -1, a key given twice, --steps below the
# checkpoint's step, and a text checkpoint resumed from another folder.
source "$(dirname "$0")/lib.bash"
command -v python3 >/dev/null || { echo "skipped: no python3"; exit 0; }
cd "$QKV_TMP"
export PYTHONPATH="$QKV_SRC/tools${PYTHONPATH:+:$PYTHONPATH}"

# ESC sequences, a C0 control, DEL, a byte that is not UTF-8 and a cut
# 3-byte character around 100 KB of text.
BIG=$(python3 -c 'import sys; sys.stdout.buffer.write(b"\x1b[31m\x1b]0;title\x07" + b"x" * 102400 + b"\x01\x7f\xff\xe2\x9c")')

# Every output file $QKV_TMP/msg.* must be a short message: each line under
# 300 bytes, UTF-8, no control byte; one line, or CLI11's two (the error,
# then "Run with --help for more information.").
check_messages() {
  python3 - "$QKV_TMP"/msg.* <<'EOF'
import sys
bad = []
for path in sys.argv[1:]:
    data = open(path, "rb").read()
    lines = data.rstrip(b"\n").split(b"\n")
    why = None
    if not data.strip():
        why = "no message"
    elif len(lines) > 2 or (len(lines) == 2 and not lines[1].startswith(b"Run with --help")):
        why = f"{len(lines)} lines"
    elif any(len(l) >= 300 for l in lines):
        why = f"a line of {max(len(l) for l in lines)} bytes"
    elif any(b < 0x20 and b != 0x0a or b == 0x7f for b in data):
        why = "a raw control byte"
    else:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            why = "invalid UTF-8"
    if why:
        bad.append(f"{path.split('/')[-1]}: {why}: {data[:200]!r}")
if bad:
    sys.exit("\n".join(bad))
EOF
}

# A checkpoint and a pairs file for the flags that need one to reach their value.
expect_ok "$TRAIN" "${TINY[@]}" --steps 3 --out run
ckpt=run/model.safetensors
printf 'a b\tb a\nc d\td c\na c\tc a\n' > pairs.tsv

# (a) Every string flag of train, each alone and where it is read.
flags=$("$TRAIN" --help | grep -o -- '--[a-z-]* TEXT' | cut -d' ' -f1 | sort -u)
[ "$(echo "$flags" | wc -l)" -ge 18 ] || fail "train --help lists only: $flags"
for f in $flags; do
  "$TRAIN" "$f" "$BIG" --steps 1 --threads 1 >"msg.train$f" 2>&1 && fail "train $f <100 KB> succeeded"
done
"$TRAIN" --data pairs.tsv --valid "$BIG" >msg.valid_with_data 2>&1 && fail "--valid <100 KB> succeeded"
"$TRAIN" --data "$BIG" --format text --model gpt >msg.data_text 2>&1 && fail "--data <100 KB> succeeded"
"$TRAIN" --load "$ckpt" --eval-only --decode "$BIG" >msg.decode 2>&1 && fail "--decode <100 KB> succeeded"
"$TRAIN" --load "$ckpt" --eval-only --data "$BIG" >msg.eval_data 2>&1 && fail "--eval-only --data <100 KB> succeeded"
"$TRAIN" --init-from "$ckpt" --task "$BIG" >msg.init_task 2>&1 && fail "--init-from --task <100 KB> succeeded"
# The value as a number's text.
"$TRAIN" --lr "$BIG" >msg.number 2>&1 && fail "--lr <100 KB> succeeded"
# Files whose names hold control bytes and are long.
name=$(printf 'bad\033[2Jname%0200d.tsv' 0)
printf 'no tab here\n' > "$name"
"$TRAIN" --data "$name" >msg.data_file 2>&1 && fail "a file without tabs trained"
check_messages || fail "the messages above are not one short line"
rm -f msg.*

# (b) step_through's string flags.
STEP="$QKV_BIN/step_through"
for f in --part --dot --html; do
  "$STEP" "$f" "$BIG" >"msg.step$f" 2>&1 && fail "step_through $f <100 KB> succeeded"
done
check_messages || fail "step_through's messages above are not one short line"
rm -f msg.*

# (c) A checkpoint's own settings: a 1 MB task or data file name, then a key given twice.
python3 - "$ckpt" <<'EOF' || fail "writing the edited checkpoints"
import json, sys
import qkv_checkpoint as qc
tensors, md = qc.read(sys.argv[1])
big = "\x1b[31m" + "x" * (1 << 20) + "\x01\x7f"
for key in ("task", "data"):
    cfg = json.loads(md["train_config"])
    cfg[key] = big
    qc.write(f"big_{key}.safetensors", tensors, dict(md, train_config=json.dumps(cfg)))
text = md["train_config"]
assert text.startswith("{")
qc.write("twice.safetensors", tensors, dict(md, train_config='{"lr": 0.5, ' + text[1:]))
EOF
for key in task data; do
  "$TRAIN" --load big_$key.safetensors --eval-only >msg.ckpt_$key 2>&1 && fail "a 1 MB $key was read"
done
check_messages || fail "a checkpoint's 1 MB setting is quoted above at length"
rm -f msg.*
expect_fail "$TRAIN" --load twice.safetensors --eval-only
expect_out "twice.safetensors: metadata 'train_config' has the key 'lr' twice in one object"

# (d) A symlink loop is said to be one, not "no such file".
ln -s loop.tsv loop.tsv
expect_fail "$TRAIN" --data loop.tsv
expect_out "--data loop.tsv: Too many levels of symbolic links"

# (e) --min-lr -1 is a negative rate, not "auto" (its default).
expect_fail "$TRAIN" "${TINY[@]}" --min-lr -1
expect_out "--min-lr: must be >= 0, got -1"

# (f) --steps below the checkpoint's step is refused: it would train nothing.
expect_fail "$TRAIN" --load "$ckpt" --steps 2
expect_out "--steps 2: the checkpoint run/model.safetensors is already at step 3"

# (g) A text checkpoint resumes from another folder (its data found at its
#     absolute path), and with --data naming the same file by another path;
#     another file is refused by its hash.
mkdir -p lm other
for i in $(seq 60); do echo "the quick brown fox $i"; done > lm/corpus.txt
LM=(--model gpt --d-model 16 --heads 2 --layers 1 --d-ff 32 --batch 4 --threads 1 --eval-every 0
    --warmup 1 --context 8)
(cd lm && expect_ok "$TRAIN" "${LM[@]}" --data corpus.txt --format text --steps 2 --out run)
(cd other && expect_ok "$TRAIN" --load ../lm/run/model.safetensors --steps 3 --save again.safetensors)
expect_out "step 3"
(cd other && expect_ok "$TRAIN" --load ../lm/run/model.safetensors --steps 3 \
  --data "$QKV_TMP/lm/./corpus.txt" --save again2.safetensors)
cp lm/corpus.txt other/changed.txt
echo "one more line" >> other/changed.txt
(cd other && expect_fail "$TRAIN" --load ../lm/run/model.safetensors --steps 3 --data changed.txt)
expect_out "changed.txt now has hash"
