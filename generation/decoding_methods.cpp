#include "generation/decoding_methods.h"

#include "core/error.h"

namespace qkv::nn {

const Registry<DecodingMethod>& decoding_methods() {
  static const Registry<DecodingMethod> table{
      "decoding method",
      {
          {"greedy", "the likeliest token at every step (every family)", false},
          {"beam", "beam search with a length penalty (--beam, --alpha; the encoder-decoder)",
           true},
      }};
  return table;
}

const DecodingMethod* find_decoding_method(const std::string& name) {
  return decoding_methods().find(name);
}

std::string decoding_method_names(const std::string& quote) {
  return decoding_methods().names(quote);
}

const DecodingMethod& decoding_method(const std::string& name, const std::string& flag) {
  return decoding_methods().at(name, flag);
}

}  // namespace qkv::nn
