#include "generation/decoding_methods.h"

#include "core/error.h"

namespace qkv::nn {

const std::vector<DecodingMethod>& decoding_methods() {
  static const std::vector<DecodingMethod> table = {
      {"greedy", "the likeliest token at every step (every family)", false},
      {"beam", "beam search with a length penalty (--beam, --alpha; the encoder-decoder)", true},
  };
  return table;
}

const DecodingMethod* find_decoding_method(const std::string& name) {
  for (const DecodingMethod& m : decoding_methods())
    if (name == m.name) return &m;
  return nullptr;
}

std::string decoding_method_names(const std::string& quote) {
  return one_of(
      decoding_methods(), [](const DecodingMethod& m) { return m.name; }, quote);
}

const DecodingMethod& decoding_method(const std::string& name, const std::string& flag) {
  if (const DecodingMethod* m = find_decoding_method(name)) return *m;
  throw Error(flag + ": expected " + decoding_method_names() + ", got '" + brief(name) + "'");
}

}  // namespace qkv::nn
