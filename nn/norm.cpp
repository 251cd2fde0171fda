#include "nn/norm.h"

#include "core/error.h"
#include "nn/layernorm.h"
#include "nn/rmsnorm.h"

namespace qkv::nn {

const Registry<NormKind>& norm_kinds() {
  static const Registry<NormKind> table{
      "norm",
      {
          {"layer", "LayerNorm: (x - mean) * rstd * gain + bias over D (eps 1e-5)", 2,
           [](int64_t D) -> std::shared_ptr<Norm> { return std::make_shared<LayerNorm>(D); }},
          {"rms",
           "RMSNorm: x * rrms * gain over D, rrms = 1/sqrt(mean(x^2) + eps), no bias (eps 1e-6)", 1,
           [](int64_t D) -> std::shared_ptr<Norm> { return std::make_shared<RMSNorm>(D); }},
      }};
  return table;
}

const NormKind* find_norm(const std::string& name) { return norm_kinds().find(name); }

std::shared_ptr<Norm> make_norm(const std::string& name, int64_t D) {
  return norm_kinds().at(name, "norm").make(D);
}

}  // namespace qkv::nn
