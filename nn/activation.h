// The activations a layer's feed-forward sublayer can apply (nn/ffn.h), by
// name through one table. ReLU and GELU run inside the fused loops of the
// paper's block (FeedForward); GELU is the exact erf form, x * Phi(x), as
// PyTorch's default nn.GELU(). SwiGLU is a block of its own (nn::SwiGLU:
// silu(x Wg^T) * (x Wu^T), three matrices), which nn::make_ffn builds in
// FeedForward's place.
#pragma once
#include <string>
#include <vector>

#include "core/error.h"
#include "core/registry.h"

namespace qkv::nn {

enum class Activation { ReLU, GELU, SwiGLU };

struct ActivationKind {
  const char* name;  // "relu", as flags and model files name it
  Activation act;
};

// Every activation, in the order help lists them.
inline const Registry<ActivationKind>& activation_kinds() {
  static const Registry<ActivationKind> table{
      "activation",
      {{"relu", Activation::ReLU}, {"gelu", Activation::GELU}, {"swiglu", Activation::SwiGLU}}};
  return table;
}

// "relu, gelu or swiglu".
inline std::string activation_names() { return activation_kinds().names(); }

// The row named `name`, or nullptr.
inline const ActivationKind* find_activation(const std::string& name) {
  return activation_kinds().find(name);
}

inline const char* activation_name(Activation a) {
  for (const ActivationKind& k : activation_kinds())
    if (k.act == a) return k.name;
  return "?";
}

}  // namespace qkv::nn
