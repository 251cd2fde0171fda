#include "nn/norm.h"

#include "core/error.h"
#include "nn/layernorm.h"
#include "nn/rmsnorm.h"

namespace qkv::nn {

const std::vector<NormKind>& norm_kinds() {
  static const std::vector<NormKind> table = {
      {"layer", "LayerNorm: (x - mean) * rstd * gain + bias over D (eps 1e-5)", 2,
       [](int64_t D) -> std::shared_ptr<Norm> { return std::make_shared<LayerNorm>(D); }},
      {"rms", "RMSNorm: x * rrms * gain over D, rrms = 1/sqrt(mean(x^2) + eps), no bias (eps 1e-6)",
       1, [](int64_t D) -> std::shared_ptr<Norm> { return std::make_shared<RMSNorm>(D); }},
  };
  return table;
}

const NormKind* find_norm(const std::string& name) {
  for (const NormKind& k : norm_kinds())
    if (name == k.name) return &k;
  return nullptr;
}

std::shared_ptr<Norm> make_norm(const std::string& name, int64_t D) {
  if (const NormKind* k = find_norm(name)) return k->make(D);
  throw Error("norm: expected " + one_of(norm_kinds(), [](const NormKind& k) { return k.name; }) +
              ", got '" + brief(name) + "'");
}

}  // namespace qkv::nn
