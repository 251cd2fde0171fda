# run_all: alone (it uses the browser test's packages explorer_browser.sh installs)
# train --load FILE --explain TEXT --html PAGE: the gradient explorer on a
# trained model and the user's input, for the encoder-decoder, a decoder-only
# model on pairs, the encoder-only model and a language model. The page is one
# file within the issue's size, every float64 finite difference passes, and
# the browser test (tests/browser/explorer_test.mjs) accepts it. Bad input is
# refused in one line before any work, leaving no page behind.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
expect_ok "$TRAIN" "${TINY[@]}" --steps 60 --out s2s
expect_ok "$TRAIN" --load s2s/model.safetensors --explain "a b c d" --html s2s.html
expect_out "every number in float64"
expect_out ", 0 fail,"
grep -q '"precision": *"float64"' s2s.html || fail "the page does not say its numbers are float64"
[ "$(stat -c %s s2s.html)" -lt 10000000 ] || fail "the page is over 10 MB"

# A text whose trace cannot fit is refused at once (it ran out of memory
# after 42 s), like --ask's long input; no page is written.
long=$(printf 'a b %.0s' $(seq 10000))
expect_fail "$TRAIN" --load s2s/model.safetensors --explain "$long" --html long.html
expect_out "error: --explain: the text has 20000 tokens; its trace (every value and gradient, in float64) needs about"
[ -e long.html ] && fail "a refused --explain left a page"

expect_ok "$TRAIN" "${TINY[@]}" --model gpt --steps 40 --out gpt
expect_ok "$TRAIN" --load gpt/model.safetensors --explain "b a" --html gpt.html
expect_out ", 0 fail,"

expect_ok "$TRAIN" "${TINY[@]}" --model encoder --steps 40 --out enc
expect_ok "$TRAIN" --load enc/model.safetensors --explain "a b c" --html enc.html
expect_out ", 0 fail,"
grep -q 'labels \\"a b c\\" with' enc.html || fail "the encoder's page does not say it labels the input"

printf 'the cat sat on the mat and the dog sat on the log\n%.0s' $(seq 40) > corpus.txt
expect_ok "$TRAIN" --model gpt --data corpus.txt --format text --tokens word --context 8 \
  --d-model 16 --heads 2 --layers 1 --d-ff 32 --batch 8 --steps 30 --warmup 1 --threads 1 \
  --eval-every 0 --out lm
expect_ok "$TRAIN" --load lm/model.safetensors --explain "the cat sat on" --html lm.html
expect_out ", 0 fail,"

# A llama-style model (docs/explorer.md): RMSNorm, RoPE attention and SwiGLU
# are boxes of the page, their parameters proven; with --experts the router,
# the gather and the gated sum are.
lm_flags=(--format text --tokens word --context 8 --d-model 16 --heads 4 --layers 1 --d-ff 32
  --batch 8 --steps 20 --warmup 1 --threads 1 --eval-every 0 --model gpt --preset llama)
expect_ok "$TRAIN" --data corpus.txt "${lm_flags[@]}" --out llama
expect_ok "$TRAIN" --load llama/model.safetensors --explain "the cat sat on" --html llama.html
expect_out ", 0 fail,"
for op in rms_norm multi_head_attention swiglu; do
  grep -q "\"$op\"" llama.html || fail "the llama-style page has no $op box"
done
expect_ok "$TRAIN" --data corpus.txt "${lm_flags[@]}" --experts 4 --out moe
expect_ok "$TRAIN" --load moe/model.safetensors --explain "the cat sat on" --html moe.html
expect_out ", 0 fail,"
for op in moe_router moe_gather moe_combine; do
  grep -q "\"$op\"" moe.html || fail "the MoE page has no $op box"
done

# Bad input: one line, before any work, no page.
expect_fail "$TRAIN" --load s2s/model.safetensors --explain "a b z" --html bad.html
expect_out "--explain: the token 'z' is not in the model's vocabulary"
expect_fail "$TRAIN" --load s2s/model.safetensors --explain "   " --html bad.html
expect_out "--explain: the text has no tokens"
expect_fail "$TRAIN" --load s2s/model.safetensors --explain "a b" --html no/such/dir/p.html
expect_out "--html"
expect_fail "$TRAIN" --load s2s/model.safetensors --explain "a b"
expect_out "--explain needs --html PAGE"
expect_fail "$TRAIN" --load s2s/model.safetensors --html p.html
expect_out "--html goes with --explain"
expect_fail "$TRAIN" --explain "a b" --html p.html
expect_out "--explain needs --load PATH"
expect_fail "$TRAIN" --load nothing.safetensors --explain "a b" --html p.html
expect_out "nothing.safetensors"
# A float32 train whose float64 twin is not built says which, and the command
# that builds it, runnable as printed: beside a source tree (here a tree of
# links to this one's files) `make -C TREE build/rel-f64/train`, a target make
# has (-n: it only lists what it would run); a copy outside any tree says
# where to run make. Each message is checked whole.
here=$(pwd -P)
mkdir -p tree/build/rel-f32 lone/rel-f32
for f in "$QKV_SRC"/*; do [ "$(basename "$f")" = build ] || ln -s "$f" tree/; done
cp "$TRAIN" tree/build/rel-f32/train
cp "$TRAIN" lone/rel-f32/train
why="error: --explain: the page's finite differences are computed in float64 by"
expect_fail tree/build/rel-f32/train --load s2s/model.safetensors --explain "a b" --html p.html
[ "$(cat out)" = "$why $here/tree/build/rel-f64/train, which is not built: make -C $here/tree build/rel-f64/train" ] ||
  { cat out; fail "the message for a tree without the float64 train is not the one expected"; }
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -n DEPS=0 -C "$here/tree" build/rel-f64/train >make.out 2>&1 ||
  { tail -5 make.out; fail "the printed make command has no target"; }
grep -q "examples/train.cpp" make.out || fail "make -n would not build the float64 train"
expect_fail lone/rel-f32/train --load s2s/model.safetensors --explain "a b" --html p.html
[ "$(cat out)" = "$why $here/lone/rel-f64/train, which is not built: in the qkv source tree, make build/rel-f64/train" ] ||
  { cat out; fail "the message for a copy outside a tree is not the one expected"; }
[ ! -e bad.html ] && [ ! -e p.html ] || fail "a refused --explain left a page behind"

# The browser test of the step-through's page, on the trained model's.
if [ -x "${CHROMIUM:-/usr/bin/chromium}" ] && [ -d "$QKV_BIN/browser-test/node_modules/puppeteer-core" ]; then
  cp "$QKV_SRC/tests/browser/explorer_test.mjs" "$QKV_BIN/browser-test/"
  timeout 120 node "$QKV_BIN/browser-test/explorer_test.mjs" s2s.html || fail "the browser test failed on s2s.html"
  timeout 120 node "$QKV_BIN/browser-test/explorer_test.mjs" gpt.html || fail "the browser test failed on gpt.html"
else
  echo "note: the browser part runs after explorer_browser.sh has installed puppeteer-core"
fi
