# Bring your own data: the committed date data set trains and answers; a text
# file trains a character language model; every bad data file is refused
# before training with the file (and line) named, leaving nothing behind.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
small=(--d-model 32 --heads 2 --layers 1 --d-ff 64 --batch 32 --threads 1 --eval-every 0 --warmup 1)

# Pairs: the date data, a short run (the README shows a full one).
expect_ok "$TRAIN" "${small[@]}" --data "$QKV_SRC/datasets/dates/train.tsv" --valid "$QKV_SRC/datasets/dates/valid.tsv" \
  --steps 30 --out dates
expect_out "data $QKV_SRC/datasets/dates/train.tsv (tsv, char tokens"
expect_out "held-out (1000 sequences"
expect_ok "$TRAIN" --load dates/model.safetensors --ask "3 March 2021"
[ "$(wc -l < "$QKV_TMP/out")" -eq 1 ] || fail "--ask printed more than one line"
expect_ok "$TRAIN" --load dates/model.safetensors --eval-only
# The data file changed since training: refused, naming the file. (A part
# of the held-out file: each run evaluates all of it, greedy and beam.)
head -100 "$QKV_SRC/datasets/dates/valid.tsv" > v.tsv
expect_ok "$TRAIN" "${small[@]}" --data "$QKV_SRC/datasets/dates/train.tsv" --valid v.tsv --steps 5 --out d2
echo "1 May 2000	2000-05-01" >> v.tsv
expect_fail "$TRAIN" --load d2/model.safetensors --eval-only
expect_out "v.tsv now has hash"

# A checkpoint loads anywhere: trained on files typed as relative paths, then
# asked and evaluated from another folder, and after the files moved.
mkdir -p here elsewhere
head -300 "$QKV_SRC/datasets/dates/train.tsv" > here/train.tsv
head -100 "$QKV_SRC/datasets/dates/valid.tsv" > here/valid.tsv
(cd here && expect_ok "$TRAIN" "${small[@]}" --data train.tsv --valid valid.tsv --steps 5 --out run)
(cd elsewhere && expect_ok "$TRAIN" --load ../here/run/model.safetensors --ask "3 March 2021")
(cd elsewhere && expect_ok "$TRAIN" --load ../here/run/model.safetensors --eval-only)
expect_out "held-out exact-sequence accuracy"
mv here/train.tsv moved_train.tsv
mv here/valid.tsv moved_valid.tsv
expect_ok "$TRAIN" --load here/run/model.safetensors --ask "3 March 2021"   # the vocabulary is in the file
expect_fail "$TRAIN" --load here/run/model.safetensors --eval-only
expect_out "its data file train.tsv is gone (moved or deleted): give its new path with --data"
expect_ok "$TRAIN" --load here/run/model.safetensors --eval-only --data moved_train.tsv --valid moved_valid.tsv
expect_out "held-out exact-sequence accuracy"
# Another held-out file, named anew, is taken (with a note); a changed training file is not.
head -50 "$QKV_SRC/datasets/dates/valid.tsv" > other_valid.tsv
expect_ok "$TRAIN" --load here/run/model.safetensors --eval-only --data moved_train.tsv --valid other_valid.tsv
expect_out "note: evaluating on other_valid.tsv"
echo "1 May 2000	2000-05-01" >> moved_train.tsv
expect_fail "$TRAIN" --load here/run/model.safetensors --eval-only --data moved_train.tsv --valid moved_valid.tsv
expect_out "moved_train.tsv now has hash"
# A run whose held-out set was a split of --data is evaluated on a held-out file given anew.
head -300 "$QKV_SRC/datasets/dates/train.tsv" > split_train.tsv
expect_ok "$TRAIN" "${small[@]}" --data split_train.tsv --steps 5 --out split
expect_ok "$TRAIN" --load split/model.safetensors --eval-only --valid other_valid.tsv
expect_out "note: evaluating on other_valid.tsv, not the held-out part of the run's data file"
# Resuming training on data named anew is refused when the file changed (its hash decides).
expect_fail "$TRAIN" --load here/run/model.safetensors --steps 10 --data moved_train.tsv \
  --valid moved_valid.tsv
expect_out "moved_train.tsv now has hash"

# A character language model on a text file.
for i in $(seq 300); do echo "the quick brown fox jumps over the lazy dog $i"; done > corpus.txt
expect_ok "$TRAIN" "${small[@]}" --model gpt --data corpus.txt --format text --context 32 --steps 40 --out lm
expect_out "model: gpt"
expect_out "held-out perplexity"
expect_out "samples (temperature 0.8, top-p 0.95)"
expect_ok "$TRAIN" --load lm/model.safetensors --eval-only
expect_out "held-out perplexity"
# With sparse or linear attention the run's closing samples and --ask decode
# with the key/value cache too (its running sums, for linear attention).
expect_ok "$TRAIN" "${small[@]}" --model gpt --data corpus.txt --format text --context 32 --steps 5 \
  --attention linear --out lm_linear
expect_out "samples (temperature 0.8, top-p 0.95)"
expect_ok "$TRAIN" "${small[@]}" --model gpt --data corpus.txt --format text --context 32 --steps 5 \
  --attention sparse --window 4 --global-every 8 --out lm_sparse
expect_out "samples (temperature 0.8, top-p 0.95)"
expect_ok "$TRAIN" --load lm_sparse/model.safetensors --ask "the quick" --max-new 5
# The language model continues a prompt; the same seed gives the same text.
expect_ok "$TRAIN" --load lm/model.safetensors --ask "the quick" --max-new 20
first=$(cat "$QKV_TMP/out")
[ -n "$first" ] || fail "no continuation"
expect_ok "$TRAIN" --load lm/model.safetensors --ask "the quick" --max-new 20
[ "$(cat "$QKV_TMP/out")" = "$first" ] || fail "the same seed gave another continuation"

# Bad files: each names the file and line, exits non-zero, leaves no run directory.
bad() {  # bad "expected text" file-contents [flags...]
  local want=$1 text=$2; shift 2
  printf '%b' "$text" > bad.tsv
  expect_fail "$TRAIN" "${small[@]}" --data bad.tsv --steps 3 --out badrun "$@"
  expect_out "$want"
  [ -e badrun ] && fail "left badrun/ behind ($want)"
  return 0
}
bad "bad.tsv: the file is empty" ""
bad "bad.tsv:2: expected 'source<TAB>target', found no tab" "a\tb\nno tab\n"
bad "bad.tsv:1: expected one tab, found more" "a\tb\tc\nd\te\n"
bad "bad.tsv:2: the source is empty" "a\tb\n\tb\n"
bad "the position table is shorter than a sequence of 8 tokens (bad.tsv:2)" "a\tb\nabcdefgh\tb\nc\td\n" --positions learned --context 4
bad "distinct tokens is more than --max-vocab 3" "abcd\tefgh\nijk\tlmn\n" --max-vocab 3
expect_fail "$TRAIN" "${small[@]}" --data . --steps 3 --out badrun
expect_out "--data .: not a regular file"
expect_fail "$TRAIN" "${small[@]}" --data nothing.tsv --steps 3 --out badrun
expect_out "--data nothing.tsv: no such file"
