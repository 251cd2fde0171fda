#!/usr/bin/env bash
# FROZEN ON PURPOSE. The golden files in tests/fixtures/ were each made ONCE,
# by the qkv commit that names their set, and tests/test_golden.cpp checks
# that today's code still reads them and reproduces their logits. They are
# the record of what that commit computed: NEVER regenerate them to make a
# test pass. A failing golden test means the code changed what a model
# computes or how a file is read; fix the code (or, for an intended change of
# the maths, say so in the commit and add new files beside these, never
# overwrite them).
#
#   tests/golden/make_golden.sh SET SRC OUT_DIR
#
# SET is the commit whose record to make:
#   2a77ff7  tests/fixtures/golden/ (before the families, norms, optimizers
#            and decoders moved to registration, issue 34): for each family
#            (seq2seq, gpt, encoder) and self-attention kernel (standard,
#            memory-efficient, sparse, linear), each with some other
#            architecture and optimizer switches so that the configs and
#            optimizer states in files cover them, a tiny model (d_model 4)
#            on the reverse task
#   20e1205  tests/fixtures/golden_20e1205/ (the last commit before the
#            training program's refactor, issue 50): every family (seq2seq,
#            gpt, encoder, bert's mlm and classify, vit; the t5 and llama
#            presets), every position scheme (sinusoidal, learned, rope,
#            relative), every token kind (char, word, bpe) and the built-in
#            task, mixtures of experts (one dropping over capacity) and bf16
#            products, tiny models (d_model 8) on the data golden_data.py
#            writes into OUT_DIR beside them: the checkpoints name those
#            files and hold their hashes, so they are committed with the set
# SRC is a checkout whose library, programs and Makefile are those of SET
# (the script refuses any other), with build/rel-f32/train and
# build/rel-f32/pkgconfig/qkv.pc built there:
#   git worktree add /tmp/qkv-2a77ff7 2a77ff7
#   make -C /tmp/qkv-2a77ff7 build/rel-f32/train build/rel-f32/pkgconfig/qkv.pc
#   tests/golden/make_golden.sh 2a77ff7 /tmp/qkv-2a77ff7 /tmp/golden
# (20e1205's set was made so: make_golden.sh 20e1205 /tmp/qkv-20e1205
# tests/fixtures/golden_20e1205, the files made straight into their folder.)
#
# Each run trains with dropout for 3 steps (train --save), resumes that for
# one more step (train --load --steps 4; a --precision the run gave is given
# again, as the process's setting it is not in the checkpoint), and with
# golden_logits.cpp writes
#   <name>.ckpt.safetensors    the step-3 training checkpoint
#   <name>.model.safetensors   its model alone (nn::save_model)
#   <name>.logits.safetensors  a fixed input that fits the model and the
#                              logits of the step-3 and step-4 models on it
# The runs train from inside OUT_DIR, so their checkpoints name the data
# files relative to it (corpus.txt, images, ...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage() { echo "usage: $0 2a77ff7|20e1205 SRC OUT_DIR (read the header: the files are frozen)" >&2; exit 2; }
[ $# -eq 3 ] || usage
commit=$1
case $commit in 2a77ff7 | 20e1205) ;; *) usage ;; esac
src=$(cd "$2" && pwd)
# The code that computes must be the set's commit's; other files (tests, docs) may differ.
if ! git -C "$src" diff --quiet "$commit" -- core io autograd nn data optim models generation \
    checkpoint dist explorer trainer examples Makefile; then
  echo "make_golden.sh: $src differs from $commit in its library or programs; the golden files are $commit's" >&2
  exit 1
fi
train="$src/build/rel-f32/train"
pc="$src/build/rel-f32/pkgconfig"
[ -x "$train" ] && [ -f "$pc/qkv.pc" ] || {
  echo "make_golden.sh: build first: make -C $src build/rel-f32/train build/rel-f32/pkgconfig/qkv.pc" >&2
  exit 1
}
mkdir -p "$3"
out=$(cd "$3" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2046
g++ -std=c++17 -O2 "$here/golden_logits.cpp" -o "$work/golden_logits" \
  $(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs qkv)

# Per set: the flags every run shares (common), then each run's name and the
# flags beside them (runs, "name|flags"), and the logits files' "made_by".
case $commit in
  2a77ff7)
    made_by="qkv 2a77ff7, tests/golden/make_golden.sh"
    common=(--task reverse --symbols 4 --min-len 2 --max-len 5 --heldout 8 --d-model 4 --heads 2
      --layers 1 --d-ff 8 --dropout 0.1 --batch 4 --warmup 2 --lr 0.01 --eval-every 1000
      --log-every 1000 --seed 7 --threads 1)
    runs=(
      "seq2seq_standard|--model seq2seq --attention standard"
      "seq2seq_memory-efficient|--model seq2seq --attention memory-efficient --pre-ln --tie --optimizer adamw"
      "seq2seq_sparse|--model seq2seq --attention sparse --window 2 --global-every 3 --no-scale --schedule noam"
      "seq2seq_linear|--model seq2seq --attention linear --optimizer sgd --schedule constant --activation gelu"
      "gpt_standard|--model gpt --attention standard"
      "gpt_memory-efficient|--model gpt --attention memory-efficient --post-ln --no-tie --optimizer adamw"
      "gpt_sparse|--model gpt --attention sparse --window 2 --global-every 3 --optimizer sgd"
      "gpt_linear|--model gpt --attention linear --schedule noam --d-k 3"
      "encoder_standard|--model encoder --attention standard"
      "encoder_memory-efficient|--model encoder --attention memory-efficient --pre-ln --optimizer adamw --label-smoothing 0.1"
      "encoder_sparse|--model encoder --attention sparse --window 2 --global-every 3 --schedule constant --d-k 3"
      "encoder_linear|--model encoder --attention linear --optimizer sgd --recompute ffn"
    )
    ;;
  20e1205)
    made_by="qkv 20e1205, tests/golden/make_golden.sh 20e1205"
    python3 "$here/golden_data.py" "$out"
    common=(--d-model 8 --heads 2 --layers 1 --d-ff 16 --dropout 0.1 --batch 4 --warmup 2
      --lr 0.01 --eval-every 1000 --log-every 1000 --seed 7 --threads 1)
    task="--task reverse --symbols 4 --min-len 2 --max-len 5 --heldout 8"
    rel="--positions relative --rel-buckets 8 --rel-max-distance 16"
    runs=(
      "seq2seq_moe|--model seq2seq $task --experts 4 --experts-per-token 2 --capacity-factor 2 --schedule constant"
      "seq2seq_learned_word|--model seq2seq --data pairs.tsv --tokens word --positions learned --context 16 --optimizer adamw"
      "seq2seq_t5_span_char|--model seq2seq --preset t5 --objective span --data corpus.txt --tokens char --context 16 --rel-buckets 8 --rel-max-distance 16 --schedule constant"
      "seq2seq_bf16|--model seq2seq $task --precision bf16 --pre-ln --schedule constant"
      "gpt_learned_char|--model gpt --format text --data corpus.txt --tokens char --context 16 --schedule noam"
      "gpt_rope_bpe|--model gpt --format text --data corpus.txt --tokens bpe --bpe-vocab 264 --positions rope --context 16 --schedule constant"
      "gpt_relative_word|--model gpt --format text --data corpus.txt --tokens word $rel --context 16 --optimizer adamw --schedule constant"
      "gpt_llama_char|--model gpt --preset llama --format text --data corpus.txt --tokens char --context 16 --schedule constant"
      "gpt_moe-capacity|--model gpt $task --experts 4 --experts-per-token 2 --capacity-factor 0.5 --schedule constant"
      "encoder_sinusoidal_word|--model encoder --data tags.tsv --tokens word --schedule constant"
      "encoder_relative|--model encoder $task $rel --optimizer sgd --schedule constant"
      "bert_mlm_word|--model bert --objective mlm --data corpus.txt --tokens word --context 16 --schedule constant"
      "bert_classify_bpe|--model bert --objective classify --data classify.tsv --tokens bpe --bpe-vocab 264 --context 32 --schedule constant"
      "vit_idx|--model vit --format idx --data images --patch 4 --schedule constant"
    )
    ;;
esac

# The fixed input golden_logits gives a model (its header): what the run's flags make it read.
input_of() {
  case " $* " in
    *" --model vit "*) echo image ;;
    *" --objective classify "*) echo classify ;;
    *) echo tokens ;;
  esac
}

cd "$out"  # the runs name their data files relative to it
for r in "${runs[@]}"; do
  name=${r%%|*}
  read -r -a flags <<<"${r#*|}"
  again=()  # the process's settings a checkpoint does not hold
  case " ${flags[*]} " in *" --precision bf16 "*) again=(--precision bf16) ;; esac
  "$train" "${common[@]}" "${flags[@]}" --steps 3 --out "$work/$name" \
    --save "$work/$name.step3.safetensors" >"$work/$name.log" 2>&1 || {
    cat "$work/$name.log" >&2; exit 1; }
  "$train" --load "$work/$name.step3.safetensors" --steps 4 --out "$work/$name" \
    --save "$work/$name.step4.safetensors" --threads 1 "${again[@]}" >>"$work/$name.log" 2>&1 || {
    cat "$work/$name.log" >&2; exit 1; }
  cp "$work/$name.step3.safetensors" "$out/$name.ckpt.safetensors"
  "$work/golden_logits" "$work/$name.step3.safetensors" "$work/$name.step4.safetensors" \
    "$out/$name.model.safetensors" "$out/$name.logits.safetensors" "$(input_of "${flags[@]}")" "$made_by"
  echo "$name: $(stat -c %s "$out/$name.ckpt.safetensors") + $(stat -c %s "$out/$name.model.safetensors") + $(stat -c %s "$out/$name.logits.safetensors") bytes"
done
