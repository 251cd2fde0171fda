# A language model on byte-level BPE tokens (--tokens bpe --bpe-vocab N):
# the tokenizer is learned from the training bytes of a text holding every
# byte value and invalid UTF-8, saved inside the checkpoint, so --ask and
# --eval-only need nothing else from another folder; a resume on another
# text, a tokenizer that disagrees with the run, and bad flags are refused
# in one line; the report gives bits per byte.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
# English lines, then every byte value and some invalid UTF-8 (twice, so the
# held-out last 10% holds bytes too), as bytes (not UTF-8: --tokens char refuses it).
python3 -c "
import random, sys
r = random.Random(2)
w = [''.join(r.choice('etaoinshrdlu') for _ in range(r.randint(2, 7))) for _ in range(300)]
lines = ' '.join(r.choice(w) for _ in range(1500)).encode()
junk = bytes(range(256)) + b'\xff\xfe\xc3(\xe2\x82' + 'caf\u00e9'.encode()
sys.stdout.buffer.write(junk + lines + junk)" > bytes.txt
lm=(--model gpt --data bytes.txt --format text --tokens bpe --bpe-vocab 300 --context 16
  --d-model 16 --heads 2 --layers 1 --d-ff 32 --batch 8 --steps 6 --warmup 1 --eval-every 3
  --threads 1)
expect_ok "$TRAIN" "${lm[@]}" --out run
expect_out "tokenizer: byte-level BPE, 300 tokens (256 bytes + 44 merges) + 3 special, learned from the training bytes"
expect_out "bits per byte ("
grep -q "^step,.*,heldout_bits_per_byte$" run/log.csv || fail "log.csv has no heldout_bits_per_byte column"
awk -F, 'NR > 1 && $8 != "" && $10 == "" {exit 1}' run/log.csv || fail "an evaluation row lacks bits per byte"

# The checkpoint alone, in another folder: its tokenizer is inside.
mkdir elsewhere && cp run/model.safetensors elsewhere/m.safetensors && cd elsewhere
expect_ok "$TRAIN" --load m.safetensors --ask "the cat" --max-new 12 --temperature 0
python3 -c "open('$QKV_TMP/out', 'rb').read().decode('utf-8')" \
  || fail "--ask printed bytes that are not UTF-8 (invalid ones print as U+FFFD)"
expect_ok "$TRAIN" --load m.safetensors --eval-only
expect_out "bits per byte"
cd "$QKV_TMP"
python3 "$QKV_SRC/tools/qkv_checkpoint.py" run/model.safetensors > info.txt || fail "the Python reader refused the file"
grep -q "tokenizer: bpe" info.txt || fail "the Python reader does not see the BPE tokenizer"

# A resume on another text is refused, naming the file and the key.
head -c 3000 bytes.txt > other.txt
expect_fail "$TRAIN" --load run/model.safetensors --data other.txt --steps 9
expect_out "run/model.safetensors: metadata 'bpe' key 'trained_on': its tokenizer was learned from"
[ "$(wc -l < "$QKV_TMP/out")" -eq 1 ] || { cat "$QKV_TMP/out"; fail "not one line"; }
expect_fail "$TRAIN" --load run/model.safetensors --bpe-vocab 400 --steps 9
expect_out "--bpe-vocab: the checkpoint run/model.safetensors was trained with --bpe-vocab 300"
# Fine-tuning keeps the file's tokenizer (and refuses another one).
expect_fail "$TRAIN" --init-from run/model.safetensors --data other.txt --format text --model gpt --tokens char
expect_out "--tokens char: --init-from run/model.safetensors has metadata 'tokenizer' \"bpe\""
# A file whose vocabulary is not its merges' is refused naming the key.
python3 -c "
import json, sys
sys.path.insert(0, '$QKV_SRC/tools')
import qkv_checkpoint as qc
t, md = qc.read('run/model.safetensors')
v = json.loads(md['vocab']); v[3 + ord('a')] = 'b'; md['vocab'] = json.dumps(v)
qc.write('badvocab.safetensors', t, md)
md = qc.read('run/model.safetensors')[1]
b = json.loads(md['bpe']); b['merges'][0] = [5000, 1]; md['bpe'] = json.dumps(b)
qc.write('badmerge.safetensors', t, md)"
python3 -c "
import json, sys
sys.path.insert(0, '$QKV_SRC/tools')
import qkv_checkpoint as qc
t, md = qc.read('run/model.safetensors')
c = json.loads(md['train_config']); c['tokens'] = 'char'; c['bpe_vocab'] = 0
md['train_config'] = json.dumps(c)
qc.write('badkind.safetensors', t, md)"
expect_fail "$TRAIN" --load badkind.safetensors --eval-only
expect_out "badkind.safetensors: the file's parts disagree: train_config says tokens = char but metadata 'tokenizer' is bpe"
# A weights-only model file (written in Python, as docs/checkpoint-format.md
# shows) keeps the tokenizer with the keys 'vocab', 'tokenizer' and 'bpe'.
python3 -c "
import sys
sys.path.insert(0, '$QKV_SRC/tools')
import qkv_checkpoint as qc
t, md = qc.read('run/model.safetensors')
w = {n[len('model.'):]: x for n, x in t.items() if n.startswith('model.')}
keep = {k: md[k] for k in ('model_kind', 'model_config', 'vocab', 'tokenizer', 'bpe', 'special_tokens')}
qc.write('weights.safetensors', w, keep)"
expect_ok "$TRAIN" --load weights.safetensors --ask "the cat" --max-new 8
expect_fail "$TRAIN" --load weights.safetensors --ask "the cat" --tokens char
expect_out "error: --tokens char: the model file weights.safetensors has metadata 'tokenizer' \"bpe\""
expect_fail "$TRAIN" --load badvocab.safetensors --ask "x"
expect_out "badvocab.safetensors: metadata 'vocab': vocab: entry 100 is 'b' but BPE token 97 of 'bpe' is 'a'"
expect_fail "$TRAIN" --load badmerge.safetensors --ask "x"
expect_out "badmerge.safetensors: metadata 'bpe': BPE: merge 0 (5000, 1) names a token not made"

# Bad flags: one line each, before training.
one_line() { [ "$(wc -l < "$QKV_TMP/out")" -eq 1 ] || { cat "$QKV_TMP/out"; fail "not one line"; }; }
expect_fail "$TRAIN" "${lm[@]}" --bpe-vocab 255 --out bad
expect_out "error: --bpe-vocab: must be in [256, 1048576]"; one_line
expect_fail "$TRAIN" "${lm[@]}" --bpe-vocab 100000 --out bad
expect_out "error: --bpe-vocab 100000: bytes.txt (its training part): BPE: vocab_size 100000 is more than this text allows"; one_line
expect_fail "$TRAIN" --model gpt --data bytes.txt --format text --bpe-vocab 300 --out bad
expect_out "error: --bpe-vocab: goes with --tokens bpe"; one_line
expect_fail "$TRAIN" --model encoder --data bytes.txt --tokens bpe --bpe-vocab 300 --out bad
expect_out "error: --tokens: the encoder model labels each source token"; one_line
expect_fail "$TRAIN" --tokens bpe --bpe-vocab 300 --out bad
expect_out "error: --tokens: bpe is learned from the text of --data FILE"; one_line
expect_fail "$TRAIN" --model gpt --data bytes.txt --format text --tokens bpe --out bad
expect_out "error: --bpe-vocab: --tokens bpe needs the tokenizer's size"; one_line
[ ! -e bad ] || fail "a refused run left --out behind"
