// The residual sublayer of section 3.1 of the paper, in both placements of
// its norm (any nn::Norm, nn/norm.h; the paper's is LayerNorm), shared by the
// encoder and decoder layers (models/encoder_decoder.cpp) and their cached,
// one-step-at-a-time twins (generation/kv_cache.cpp):
//   Post-LN (the paper):  norm(x + drop(f(x)))
//   Pre-LN:               x + drop(f(norm(x)))
#pragma once
#include "nn/dropout.h"
#include "nn/norm.h"

namespace qkv::nn {

template <class F>
Var sublayer(const Var& x, const Norm& norm, Dropout& drop, bool pre_norm, F f) {
  if (pre_norm) return x + drop.forward(f(norm.forward(x)));
  return norm.add_norm(x, drop.forward(f(x)));  // norm(x + ...), the sum fused into the norm
}

}  // namespace qkv::nn
