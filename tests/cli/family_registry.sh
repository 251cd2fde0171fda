# A model family is known through its own files and one table row per layer
# (trainer/family.h, checkpoint/model_file.h's ModelCodec, generation/answer.h's
# Answerer): outside a family's own files (trainer/family_*.cpp,
# checkpoint/*_codec.cpp, generation/answer_*.cpp) nothing in the library
# asks which family it holds: no is_gpt()/is_encoder(), no compare of a
# family's name, no dynamic_cast to a family's class. Decoding methods,
# optimizers, norms, kinds of positions and kinds of tokens are rows of
# their tables, their names written once (a position kind's in
# trainer/position_<name>.cpp and in the rows of the families that take it);
# no row of any table (a data source, an evaluation kind) is compared by its
# name once found, nor a data format by its name.
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
# The names come from the tables' rows, so a family or kind added tomorrow is
# guarded without editing this script: families (trainer/family_<name>.cpp,
# f.name = "..."), their model classes (models/*.h, ": public Model"), kinds
# of positions (trainer/position_<name>.cpp), and the rows of the
# optimizer, decoding-method and activation tables, and kinds of tokens
# (trainer/tokens_<name>.cpp).
names() { sed -n "s/$1/\\1/p" "${@:2}" | sort -u | paste -sd '|'; }
families=$(names '.*f\.name = "\([a-z0-9_-]*\)".*' trainer/family_*.cpp)
classes=$(names '^class \([A-Za-z0-9_]*\) \(final \)\{0,1\}: public \(nn::\)\{0,1\}Model\b.*' models/*.h)
kinds=$(names '.*k\.name = "\([a-z0-9_-]*\)".*' trainer/position_*.cpp)
tokens=$(names '.*k\.name = "\([a-z0-9_-]*\)".*' trainer/tokens_*.cpp)
rows=$(names '^ *{"\([a-z0-9_-]*\)",.*' optim/optimizers.cpp generation/decoding_methods.cpp)
acts=$(grep -ho '{"[a-z0-9_]*", Activation::' nn/activation.h | cut -d'"' -f2 | sort -u | paste -sd '|')
for t in families classes kinds tokens rows acts; do
  [ -n "${!t}" ] && [[ "${!t}" == *"|"* ]] || fail "found no more than one name for $t (${!t}): the rows' spelling changed?"
done
case "|$families|" in *"|gpt|"* ) ;; *) fail "the families read from their rows ($families) lack gpt" ;; esac
case "|$classes|" in *"|ViT|"* ) ;; *) fail "the model classes read from models/ ($classes) lack ViT" ;; esac
bad=$(grep -nE "is_gpt\(\)|is_encoder\(\)|[=!]= *\"($families)\"|\"($families)\" *[=!]=|dynamic_cast<[^>]*\b($classes)\b" \
  "${files[@]}" || true)
[ -z "$bad" ] || { echo "$bad"; fail "the library asks which family it holds (above): ask the family's entry"; }
# Each table's names are spelled in one place (its row), not in checks elsewhere.
# (A norm's names, "layer" and "rms", are words other settings use too, such
# as --recompute layer: a norm is caught by the setting it is compared in.)
bad=$(grep -nE "[=!]= *\"($rows|$acts)\"|\"($rows|$acts)\" *[=!]=|norm *[=!]= *\"" "${files[@]}" || true)
[ -z "$bad" ] || { echo "$bad"; fail "a norm, optimizer, decoding method or activation compared by name (above): use its table"; }
bad=$(grep -nE "[=!]= *\"($kinds)\"|\"($kinds)\" *[=!]=|positions *[=!]= *\"" \
  "${files[@]}" | grep -v '^trainer/position_[a-z]*\.cpp:' || true)
[ -z "$bad" ] || { echo "$bad"; fail "a kind of positions compared by name (above): use trainer/positions.h's table"; }
bad=$(grep -nE "[=!]= *\"($tokens)\"|\"($tokens)\" *[=!]=|tokens *[=!]= *\"" \
  "${files[@]}" | grep -v '^trainer/tokens_[a-z]*\.cpp:' || true)
[ -z "$bad" ] || { echo "$bad"; fail "a kind of tokens compared by name (above): use trainer/token_kinds.h's table"; }
# A data format is asked what its files hold (trainer/data_sources.h's
# format_holds), not compared by name, in the families' files too.
formats=$(names '.*s\.format = "\([a-z0-9_-]\{1,\}\)".*' trainer/*.cpp)
[[ "$formats" == *"|"* ]] || fail "found no more than one data format ($formats): the rows' spelling changed?"
bad=$(grep -nE "format *[=!]= *\"|[=!]= *\"($formats)\"|\"($formats)\" *[=!]=" "${files[@]}" trainer/family_*.cpp || true)
[ -z "$bad" ] || { echo "$bad"; fail "a data format compared by name (above): ask format_holds or the source's row"; }
# Nor is a row asked for by its name once it is found: `kind.name == "..."`
# (a data source, an evaluation kind, any row) means a chain has come back.
bad=$(grep -nE '(\.|->)name\)? *[=!]= *"' "${files[@]}" || true)
[ -z "$bad" ] || { echo "$bad"; fail "a table's row compared by its name (above): give the row the member it needs"; }
bad=$(grep -nE 'LayerNorm&|make_shared<LayerNorm>|shared_ptr<LayerNorm>' "${files[@]}" | grep -v '^nn/norm\.cpp:' || true)
[ -z "$bad" ] || { echo "$bad"; fail "a layer names LayerNorm instead of nn::Norm (above)"; }
echo "${#files[@]} library files ask no family ($families), model class, method, optimizer, norm, activation, positions, tokens, format or row by name"
