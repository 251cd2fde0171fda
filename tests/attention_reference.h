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

// xq (B,T,D), xkv (B,S,D); p = {wq, bq, wk, bk, wv, bv, wo, bo}.
inline Var composed_attention(const Var& xq, const Var& xkv, const std::vector<Var>& p, int64_t H,
                              const nn::AttentionMask& mask) {
  const int64_t B = xq.size(0), T = xq.size(1), S = xkv.size(1), D = xq.size(2), dk = D / H;
  auto proj = [](const Var& x, const Var& w, const Var& b) {
    return matmul(x, w, false, true) + b;
  };
  // (B,T,D) -> (B,T,H,d_k) -> (B,H,T,d_k)
  auto heads = [&](const Var& x, int64_t L) {
    return permute(reshape(x, {B, L, H, dk}), {0, 2, 1, 3});
  };
  Var Q = heads(proj(xq, p[0], p[1]), T);
  Var K = heads(proj(xkv, p[2], p[3]), S);
  Var V = heads(proj(xkv, p[4], p[5]), S);
  Var scores =
      matmul(Q, K, false, true) * (real(1) / std::sqrt(static_cast<real>(dk)));  // (B,H,T,S)
  scores = scores + Var(additive_mask(mask, B, T, S));
  Var O = matmul(softmax(scores), V);                         // (B,H,T,d_k)
  Var merged = reshape(permute(O, {0, 2, 1, 3}), {B, T, D});  // (B,T,D)
  return proj(merged, p[6], p[7]);
}

}  // namespace qkv::testing
