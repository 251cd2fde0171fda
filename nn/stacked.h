// Blocks of numbers, read as one: a pointer to the numbers of each part
// (each part's numel()), back to back. When the parts already lie back to
// back in one buffer (as nn::MultiHeadAttention keeps W_Q, W_K, W_V), that is
// the first part's pointer and nothing is copied; otherwise the parts are
// copied into `scratch` (resized to their total), which must outlive the
// pointer's use. The fused attention op uses it to compute the projections of
// one input with a single sgemm over the stacked weights [Wq; Wk; Wv]
// (2*H*d_k + D, D), and the KV cache (generation/kv_cache.cpp) likewise.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "core/tensor.h"

namespace qkv::nn {

const real* stacked(std::initializer_list<const Tensor*> parts, Tensor& scratch);

}  // namespace qkv::nn
