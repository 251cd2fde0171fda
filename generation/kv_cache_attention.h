// The KV cache's attention steps, shared by its files (the public API is
// generation/kv_cache.h):
//   generation/kv_cache.cpp            the cache itself, start_* and the model steps
//   generation/kv_cache_attention.cpp  the projections, softmax attention over every
//                                      cached key, sparse attention over the keys the
//                                      pattern lets a query see, cross-attention
//   generation/kv_cache_linear.cpp     causal linear attention from running sums
#pragma once
#include <cstdint>

#include "generation/kv_cache.h"

namespace qkv::nn::kv_cache_detail {

// Self-attention of x (R, n, D), the positions [t0, t0 + n), with what layer
// l of the cache holds for [0, t0): adds the new positions to it and returns
// the attention's output (R, n, D). The module's kernel picks the maths.
Tensor self_attention_step(MultiHeadAttention& a, const Tensor& x, KVCache& c, size_t l,
                           int64_t t0);

// Cross-attention of x (R, n, D) over the encoder memory's cached [K | V]
// (B_src, S, E + D): softmax over every unpadded source key.
Tensor cross_attention_step(MultiHeadAttention& a, const Tensor& x, const Tensor& mem_kv,
                            const KVCache& c);

// Causal linear attention of n new positions per row from the running sums:
// QKV (R*n, ld) holds [Q | K | V] of the new positions (Q, K: H*d_k columns,
// V: H*d_v); S (R, H, d_k, d_v) and z (R, H, d_k) are updated in place; the
// heads' outputs go to O (R*n, H*d_v). generation/kv_cache_linear.cpp.
void linear_attention_step(const real* QKV, int64_t ld, Tensor& S, Tensor& z, int64_t R, int64_t n,
                           int64_t H, int64_t dk, int64_t dv, real* O);

}  // namespace qkv::nn::kv_cache_detail
