# Every bad flag value is refused before any work, with an error naming the
# flag, a non-zero exit, and no output directory or file left behind.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
refused() {  # refused "expected text" flags...
  local want=$1; shift
  expect_fail "$TRAIN" "${TINY[@]}" --steps 3 "$@"
  expect_out "$want"
  grep -q "^step" "$QKV_TMP/out" && fail "trained despite $*"
  [ -e runs ] && fail "left runs/ behind for $*"
  return 0
}
refused "--heads: 3 heads do not divide --d-model 16" --heads 3
refused "--min-len: 5 is more than --max-len 3" --min-len 5 --max-len 3
refused "--threads: must be in [0, 1024], got -1" --threads -1
refused "--threads: must be in [0, 1024], got 5000" --threads 5000
refused "--lr: expected a finite number, got 'nan'" --lr nan
refused "--lr: must be finite, > 0" --lr -1
refused "--steps must be in [1, 1000000000], got 0" --steps 0
refused "--d-model must be in [1, 16384], got 100000" --d-model 100000
refused "--batch must be in [1, 65536], got -4" --batch -4
refused "--warmup: 50 is more than --steps 3" --warmup 50
refused "--dropout: must be in [0, 1), got 1" --dropout 1
refused "--max-len must be in [1, 4096], got 100000" --max-len 100000
refused "--context 4: the position table is shorter" --positions learned --context 4
refused "GiB" --d-model 8192 --d-ff 65536 --layers 128 --heads 8
refused "--eval-only needs --load PATH" --eval-only
refused "--ask needs --load PATH" --ask "a b"
refused "--log-every: must be >= 1" --log-every 0
refused "--target: must be in (0, 1]" --target 2
# An on/off flag takes no value (its --no- twin says off): not read as off
# from "-1", and a long value is not echoed.
for v in -1 false 2 nan 1e309 "$(head -c 100000 /dev/zero | tr '\0' x)"; do
  refused "error: --no-early-stop: an on/off flag takes no value" --no-early-stop="$v"
  [ "$(wc -c <"$QKV_TMP/out")" -lt 300 ] || fail "--no-early-stop=<${#v} bytes>: the error is $(wc -c <"$QKV_TMP/out") bytes"
done
refused "--model: expected seq2seq, gpt, encoder, bert or vit" --model mamba
refused "--positions: the gpt model has a learned position table, rotary positions (rope) or T5's relative bias (relative), not 'sinusoidal'" --model gpt --positions sinusoidal
refused "--rope-base: sets rope's base; give --positions rope too (or leave it out)" --model gpt --rope-base 500
refused "--rope-base: must be in (1, 1e9], got 0.5" --model gpt --positions rope --rope-base 0.5
refused "--format: text (a plain corpus) trains a language model: use --model gpt (or bert, or seq2seq with --objective span)" --model encoder --data /etc/hostname --format text
refused "--objective: a text corpus (--format text) trains the seq2seq model by span corruption" --data /etc/hostname --format text
refused "--steps" --steps abc
refused "--optimizer: expected adam, adamw or sgd, got 'lion'" --optimizer lion
refused "--attention: expected standard, memory-efficient, sparse, linear or auto, got 'fast'" --attention fast
refused "--window must be in [1, 1048576], got 0" --window 0
refused "--recompute: expected none, ffn or layer, got 'all'" --recompute all
refused "--d-k: must be >= 1, got 0 (leave it out for d_model / heads)" --d-k 0
refused "--d-k: must be >= 1, got -2" --d-k -2
refused "--d-k: must be >= 1 and <= 16384 (0: d_model / heads), got 20000" --d-k 20000
refused "--d-k: expected a whole number in decimal digits, got '2.5'" --d-k 2.5
refused "--beta2: must be in [0, 1), got 1" --beta2 1
refused "--weight-decay: must be in [0, 1), got 2" --weight-decay 2
refused "--min-lr: must be in [0, --lr 0.002], got 1" --min-lr 1
# An empty string is a value, never "not given" (which would start a new run
# over runs/<task>/), and numbers are read as typed: no hex, no wrap-around of
# a negative unsigned seed, no clamping of a number out of range.
refused "--ask: the value is empty" --ask ''
refused "--load: the value is empty" --load ''
refused "--save: the value is empty" --save ''
refused "--out: the value is empty" --out ''
refused "--data: the value is empty" --data ''
refused "--steps: expected a number, got an empty string" --steps ''
refused "--steps: expected a whole number in decimal digits, got '0x10'" --steps 0x10
refused "--seed: must not be negative, got '-1'" --seed -1
refused "--steps: '99999999999999999999' is out of range" --steps 99999999999999999999
refused "--lr: '1e999' is out of range" --lr 1e999
refused "--lr: expected a decimal number" --lr 0x1p3
# A number of 300 digits is quoted briefly, not whole.
expect_fail "$TRAIN" --lr "$(printf '9%.0s' $(seq 300))"
expect_out "is out of range"
[ "$(wc -c < "$QKV_TMP/out")" -lt 300 ] || fail "a 300-digit value was quoted whole"
# A --save name whose temporary file name passes the file system's limit is
# refused before training (the trained model would be lost at the end).
refused "cannot create the file" --save "$(printf 'a%.0s' $(seq 250)).st"
# Bytes that are not UTF-8 in a data file: refused before training, naming line and byte.
printf 'ab\tba\ncd\tdc\nx\377y\tz\n' > latin1.tsv
refused "--data latin1.tsv:3: byte 0xff at column 2 is not UTF-8" --data latin1.tsv

# The optimizer flags, as the run's header reports them.
"$TRAIN" "${TINY[@]}" --steps 3 --optimizer adamw --beta2 0.99 --min-lr 0.0001 --out o_adamw >log_o 2>&1 || { cat log_o; fail "--optimizer adamw"; }
grep -q "AdamW(0.9, 0.99, 1e-9), weight decay 0.01 on Linear weights, cosine lr 0.002 to 0.0001" log_o || { cat log_o; fail "the header does not show AdamW's settings"; }
"$TRAIN" "${TINY[@]}" --steps 3 --optimizer sgd --momentum 0.5 --lr 0.1 --out o_sgd >log_o 2>&1 || { cat log_o; fail "--optimizer sgd"; }
grep -q "SGD(momentum 0.5)" log_o || { cat log_o; fail "the header does not show SGD"; }

# A sparse (or linear) encoder-decoder trains and reports: greedy decoding
# and beam search beside it, both with the key/value cache.
"$TRAIN" "${TINY[@]}" --steps 3 --attention sparse --window 2 --global-every 3 --out o_sparse >log_o 2>&1 || { cat log_o; fail "--attention sparse"; }
grep -q "greedy:" log_o || { cat log_o; fail "no held-out report for a sparse model"; }
grep -q "beam 4" log_o || { cat log_o; fail "no beam search for a sparse model"; }
"$TRAIN" "${TINY[@]}" --steps 3 --attention linear --no-scale --recompute layer --out o_linear >log_o 2>&1 || { cat log_o; fail "--attention linear"; }
grep -q "beam 4" log_o || { cat log_o; fail "no beam search for a linear model"; }

# --d-k sets the attention's query/key head size apart from d_model / heads
# (Table 3 row B): with the standard kernel (greedy and beam decoding with the
# key/value cache) and with the linear one; the checkpoint keeps it, so
# --load needs no --d-k, and a different --d-k is refused by name.
"$TRAIN" "${TINY[@]}" --steps 3 --d-k 3 --out o_dk --save dk.safetensors >log_o 2>&1 || { cat log_o; fail "--d-k 3"; }
grep -q "2 heads (d_k 3)," log_o || { cat log_o; fail "the header does not show d_k"; }
grep -q "beam 4" log_o || { cat log_o; fail "no beam search with --d-k"; }
expect_ok "$TRAIN" --load dk.safetensors --eval-only
expect_out "2 heads (d_k 3),"
expect_fail "$TRAIN" --load dk.safetensors --eval-only --d-k 4
expect_out "--d-k: the checkpoint dk.safetensors was trained with --d-k 3, but the command line gives 4"
"$TRAIN" "${TINY[@]}" --steps 3 --d-k 5 --attention linear --out o_dk_linear >log_o 2>&1 || { cat log_o; fail "--d-k 5 --attention linear"; }
grep -q "2 heads (d_k 5)," log_o || { cat log_o; fail "the header does not show d_k with --attention linear"; }
"$TRAIN" "${TINY[@]}" --steps 3 --d-k 2 --attention memory-efficient --model gpt --out o_dk_gpt >log_o 2>&1 || { cat log_o; fail "--d-k 2 --model gpt"; }
