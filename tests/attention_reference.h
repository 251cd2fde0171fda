// Multi-head attention composed from primitive autograd ops (matmul, reshape,
// permute, softmax, add). Slow and allocation-heavy, but every step is an op
// whose gradient is checked on its own: the reference the fused layer must match.
#pragma once
#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "nn/attention.h"

namespace qkv::testing {

// Additive mask (B,1,T,S): -inf where hidden, 0 elsewhere.
inline Tensor additive_mask(const nn::AttentionMask& m, int64_t B, int64_t T, int64_t S) {
  Tensor t = Tensor::zeros({B, 1, T, S});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j)
        if (m.hidden(b, i, j, T, S))
          t.data()[(b * T + i) * S + j] = -std::numeric_limits<real>::infinity();
  return t;
}

// xq (B,T,D), xkv (B,S,D); p = {wq, bq, wk, bk, wv, bv, wo, bo}, wq and wk
// (H*d_k, D), wv and wo (D, D): the query/key head size d_k is read off wq,
// the value head size is d_v = D / H.
inline Var composed_attention(const Var& xq, const Var& xkv, const std::vector<Var>& p, int64_t H,
                              const nn::AttentionMask& mask) {
  const int64_t B = xq.size(0), T = xq.size(1), S = xkv.size(1), D = xq.size(2);
  const int64_t dk = p[0].size(0) / H, dv = D / H;
  auto proj = [](const Var& x, const Var& w, const Var& b) {
    return matmul(x, w, false, true) + b;
  };
  // (B,L,H*d) -> (B,L,H,d) -> (B,H,L,d)
  auto heads = [&](const Var& x, int64_t L, int64_t d) {
    return permute(reshape(x, {B, L, H, d}), {0, 2, 1, 3});
  };
  Var Q = heads(proj(xq, p[0], p[1]), T, dk);   // (B,H,T,d_k)
  Var K = heads(proj(xkv, p[2], p[3]), S, dk);  // (B,H,S,d_k)
  Var V = heads(proj(xkv, p[4], p[5]), S, dv);  // (B,H,S,d_v)
  Var scores =
      matmul(Q, K, false, true) * (real(1) / std::sqrt(static_cast<real>(dk)));  // (B,H,T,S)
  scores = scores + Var(additive_mask(mask, B, T, S));
  Var O = matmul(softmax(scores), V);                         // (B,H,T,d_v)
  Var merged = reshape(permute(O, {0, 2, 1, 3}), {B, T, D});  // (B,T,D)
  return proj(merged, p[6], p[7]);
}

}  // namespace qkv::testing
