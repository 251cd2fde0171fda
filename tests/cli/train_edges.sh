#!/usr/bin/env bash
# The edges of issue 49, each a file or a flag a user hands the trainer:
# a 'labels' key in a file of a family that does not classify (it segfaulted
# --eval-only, --ask and a resume), a bert mlm file with classes, duplicate
# or terminal-escaping label names, weights so large that float32 overflows
# (NaN results with exit status 0), BPE merges that double a token each
# time (2^45 bytes asked for), flags that were dropped without a word, and
# --init-from's run flags blamed on the file. One clear line each.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"

# edit SRC DST PY: DST is SRC with its header rewritten by PY (a statement on
# h, the header dict, and m = h['__metadata__']), or its model tensors set to
# +-3e38 (PY = "huge").
edit() {
  python3 - "$@" <<'PY'
import array, json, struct, sys
src, dst, code = sys.argv[1:4]
b = open(src, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); m = h["__metadata__"]; data = bytearray(b[8 + n:])
if code == "huge":
    pre = m.get("model_prefix", "")
    for k, v in h.items():
        if k == "__metadata__" or v["dtype"] != "F32" or not k.startswith(pre) or "norm" in k:
            continue
        s, e = v["data_offsets"]
        a = array.array("f", bytes(data[s:e]))
        for i in range(len(a)): a[i] = 3e38 if a[i] >= 0 else -3e38
        data[s:e] = a.tobytes()
else:
    exec(code)
hb = json.dumps(h).encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
open(dst, "wb").write(struct.pack("<Q", len(hb)) + hb + bytes(data))
PY
}
one_line() {
  expect_fail "$@"
  [ "$(wc -l < "$QKV_TMP/out")" = 1 ] || { cat "$QKV_TMP/out"; fail "not one line: $*"; }
}

# (1) 'labels' in a gpt file: refused at load, for every use, naming the key.
expect_ok "$TRAIN" --model gpt "${TINY[@]}" --task reverse --steps 5 --out g
edit g/model.safetensors lab.safetensors 'm["labels"] = json.dumps(["a", "b"])'
for use in --eval-only "--ask a" "--steps 10"; do
  # shellcheck disable=SC2086
  one_line "$TRAIN" --load lab.safetensors $use
  expect_out "error: lab.safetensors: metadata 'labels': this gpt model has no classifier head (model_config)"
done
cmp -s g/model.safetensors lab.safetensors && fail "the edit did nothing"

# (2) Weights of +-3e38: no NaN reported as a result, exit status 1.
edit g/model.safetensors huge.safetensors huge
expect_fail "$TRAIN" --load huge.safetensors --eval-only
expect_out "too large for float32"
grep -qiE "accuracy|perplexity" "$QKV_TMP/out" && { cat "$QKV_TMP/out"; fail "a result was reported"; }
expect_fail "$TRAIN" --load huge.safetensors --ask "a b c"
expect_out "too large for float32 on this input, so there is no answer to give"

# (3) A classifier's label names: duplicates refused, escapes quoted.
printf 'a b\tx\nb a\ty\na a\tx\nb b\ty\na b a\tx\nb a b\ty\n' > two.tsv
for i in 1 2 3; do cat two.tsv; done > six.tsv
expect_ok "$TRAIN" --model bert --tokens word "${TINY[@]}" --data six.tsv --steps 3 --out c
edit c/model.safetensors dup.safetensors 'm["labels"] = json.dumps(["x", "x"])'
one_line "$TRAIN" --load dup.safetensors --ask "a b"
expect_out "error: dup.safetensors: metadata 'labels' names 'x' twice"
edit c/model.safetensors esc.safetensors 'm["labels"] = json.dumps(["\u001b[31mred", "y"])'
expect_ok "$TRAIN" --load esc.safetensors --ask "a b"
grep -q $'\x1b' "$QKV_TMP/out" && fail "--ask printed a label's terminal escape raw"
grep -qF '\x1b[31mred' "$QKV_TMP/out" || { cat "$QKV_TMP/out"; fail "--ask did not quote the label"; }
# 60 labels: confusion.svg draws the 40 most frequent, and says so.
python3 -c "
for i in range(240): print('a b' if i % 2 else 'b a', 'L%02d' % (i % 60 if i < 180 else i % 7), sep='\t')
" > many.tsv
expect_ok "$TRAIN" --model bert --tokens word "${TINY[@]}" --data many.tsv --steps 3 --out many
grep -q "the 40 most frequent of 60 labels" many/confusion.svg || fail "confusion.svg does not say it shows 40 of 60 labels"
[ "$(grep -o '>L[0-9][0-9]<' many/confusion.svg | sort -u | wc -l)" = 40 ] || fail "confusion.svg does not draw 40 labels"
# A bert that learned by masks has no classifier, whatever its 'classes'
# says (the library builds none): it evaluates as a masked language model,
# and label names in its file are refused.
expect_ok "$TRAIN" --model bert --tokens word "${TINY[@]}" --objective mlm --data six.tsv --format text \
  --context 8 --steps 3 --out mlm
edit mlm/model.safetensors mlmc.safetensors \
  'c = json.loads(m["model_config"]); c["classes"] = 3; m["model_config"] = json.dumps(c)'
expect_ok "$TRAIN" --load mlmc.safetensors --eval-only --data six.tsv --format text
expect_out "held-out masked-token accuracy"
edit mlmc.safetensors mlml.safetensors 'm["labels"] = json.dumps(["p", "q", "r"])'
one_line "$TRAIN" --load mlml.safetensors --eval-only --data six.tsv --format text
expect_out "metadata 'labels': this bert model has no classifier head (model_config)"

# (4) BPE merges that double a token each time: refused from the lengths,
# before any byte is spelled out, naming the file and the key.
printf 'the cat sat on the mat and the dog sat on the log\n%.0s' {1..40} > t.txt
expect_ok "$TRAIN" --model gpt "${TINY[@]}" --data t.txt --format text --tokens bpe --bpe-vocab 270 \
  --context 8 --steps 3 --out b
edit b/model.safetensors bomb.safetensors '
bpe = json.loads(m["bpe"]); bpe["merges"] = [[97, 97]] + [[255 + k, 255 + k] for k in range(1, 46)]
m["bpe"] = json.dumps(bpe)'
one_line timeout 20 "$TRAIN" --load bomb.safetensors --eval-only --data t.txt
expect_out "error: bomb.safetensors: metadata 'bpe': BPE: merge 20 (275, 275) makes a token of more than 1048576 bytes"
# A BPE file a merge short: told as a count.
edit b/model.safetensors short.safetensors '
bpe = json.loads(m["bpe"]); bpe["merges"] = bpe["merges"][:-1]; m["bpe"] = json.dumps(bpe)'
one_line "$TRAIN" --load short.safetensors --eval-only --data t.txt
expect_out "but 'bpe' has 13 merges (1 more in the list)"

# An IDX folder whose images file is a symlink loop: the loop, not "no file".
mkdir idx && ln -s train-images-idx3-ubyte idx/train-images-idx3-ubyte
printf '\0\0\10\1\0\0\0\1\0' > idx/train-labels-idx1-ubyte
one_line "$TRAIN" --model vit --data idx --steps 30 --warmup 1 --out x
expect_out "error: idx/train-images-idx3-ubyte: Too many levels of symbolic links"

# A pattern PCRE2 gives up on (its match limit): the text and the file's key.
edit b/model.safetensors slow.safetensors '
bpe = json.loads(m["bpe"]); bpe["pattern"] = "(a+)+$"; m["bpe"] = json.dumps(bpe)'
one_line "$TRAIN" --load slow.safetensors --ask "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"
expect_out "error: --ask aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab: BPE: the pre-split pattern failed at byte 0: match limit exceeded (the pattern is metadata 'bpe' key 'pattern' of slow.safetensors)"

# (5) Flags that were dropped without a word.
one_line "$TRAIN" --model gpt "${TINY[@]}" --data t.txt --format text --tokenizer-from b/model.safetensors \
  --bpe-vocab 1000 --context 8 --steps 3 --out x
expect_out "error: --bpe-vocab 1000: --tokenizer-from b/model.safetensors holds a BPE tokenizer of 270 tokens (leave the flag out)"
one_line "$TRAIN" --model gpt "${TINY[@]}" --data t.txt --format text --tokens bpe --bpe-vocab 270 \
  --max-vocab 50 --context 8 --steps 3 --out x
expect_out "error: --max-vocab: caps a vocabulary of characters or words"
one_line "$TRAIN" --init-from g/model.safetensors --task reverse --context 128 --steps 5 --out x
expect_out "error: --context 128: --init-from g/model.safetensors holds a position table of"
[ ! -e x ] || fail "a refused run left x/ behind"

# (6) --init-from: the run's own values are the command line's, and named so.
one_line "$TRAIN" --init-from g/model.safetensors --task reverse --lr 1e7 --steps 5
expect_out "error: --lr"
one_line "$TRAIN" --init-from g/model.safetensors --task reverse --batch 0 --steps 5
expect_out "error: --batch"
one_line "$TRAIN" --init-from g/model.safetensors --task reverse --clip -1 --steps 200
expect_out "error: --clip"
grep -q "metadata" "$QKV_TMP/out" && fail "a flag's value was blamed on the file"
one_line "$TRAIN" --init-from g/model.safetensors --task reverse --steps 50
expect_out "error: --warmup: 100 is more than --steps 50"
one_line "$TRAIN" --load g/model.safetensors --explain "a b" --html x.html --precision bf16
expect_out "error: --precision bf16: --explain computes every number in float64"
true
