# A model family is known through its own files and one table row per layer
# (trainer/family.h, checkpoint/model_file.h's ModelCodec, generation/answer.h's
# Answerer): outside a family's own files (trainer/family_*.cpp,
# checkpoint/*_codec.cpp, generation/answer_*.cpp) nothing in the library
# asks which family it holds: no is_gpt()/is_encoder(), no compare of a
# family's name, no dynamic_cast to a family's class. Decoding methods,
# optimizers, norms and kinds of positions are rows of their tables, their
# names written once (a kind's in trainer/position_<name>.cpp and in the rows
# of the families that take it).
source "$(dirname "$0")/lib.bash"
cd "$QKV_SRC"
read -r -a layers <<< "$(sed -n 's/^LAYERS *:= *//p' Makefile)"
files=()
for dir in "${layers[@]}"; do
  for f in "$dir"/*.h "$dir"/*.cpp; do
    [ -e "$f" ] || continue
    case "$f" in trainer/family_*.cpp | checkpoint/*_codec.cpp | generation/answer_*.cpp) continue ;; esac
    files+=("$f")
  done
done
[ "${#files[@]}" -gt 50 ] || fail "found only ${#files[@]} library files"
bad=$(grep -nE 'is_gpt\(\)|is_encoder\(\)|[=!]= *"(seq2seq|gpt|encoder)"|"(seq2seq|gpt|encoder)" *[=!]=|dynamic_cast<[^>]*(Seq2SeqTransformer|GPT|EncoderOnlyModel)\b' \
  "${files[@]}" | grep -vE '^trainer/config\.h:[0-9]+: *bool is_(gpt|encoder)\(\) const' || true)
[ -z "$bad" ] || { echo "$bad"; fail "the library asks which family it holds (above): ask the family's entry"; }
# Each table's names are spelled in one place (its row), not in checks elsewhere.
bad=$(grep -nE '[=!]= *"(greedy|beam|adam|adamw|sgd)"' "${files[@]}" || true)
[ -z "$bad" ] || { echo "$bad"; fail "a decoding method or optimizer compared by name (above): use its table"; }
bad=$(grep -nE '[=!]= *"(sinusoidal|learned|rope|relative)"|"(sinusoidal|learned|rope|relative)" *[=!]=|positions *[=!]= *"' \
  "${files[@]}" | grep -v '^trainer/position_[a-z]*\.cpp:' || true)
[ -z "$bad" ] || { echo "$bad"; fail "a kind of positions compared by name (above): use trainer/positions.h's table"; }
bad=$(grep -nE 'LayerNorm&|make_shared<LayerNorm>|shared_ptr<LayerNorm>' "${files[@]}" | grep -v '^nn/norm\.cpp:' || true)
[ -z "$bad" ] || { echo "$bad"; fail "a layer names LayerNorm instead of nn::Norm (above)"; }
echo "${#files[@]} library files ask no family, method, optimizer, norm or positions by name"
