// Multi-head attention composed from primitive autograd ops (matmul, reshape,
// permute, softmax, add). Slow and allocation-heavy, but every step is an op
// whose gradient is checked on its own: the reference the fused layer must match.
#pragma once
#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "nn/attention.h"
#include "nn/rope.h"

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

// The heads of projected Q (B,T,H*d_k), K (B,S,H*d_k), V (B,S,H*d_v) attended
// and merged, then the output projection wo, bo (D, D), (D). score_bias, when
// defined, (1,H,T,S) or (B,H,T,S), is added to the scaled scores before the mask.
inline Var composed_heads(const Var& Qp, const Var& Kp, const Var& Vp, const Var& wo, const Var& bo,
                          int64_t H, const nn::AttentionMask& mask, const Var& score_bias = Var()) {
  const int64_t B = Qp.size(0), T = Qp.size(1), S = Kp.size(1), D = wo.size(0);
  const int64_t dk = Qp.size(2) / H, dv = Vp.size(2) / H;
  // (B,L,H*d) -> (B,L,H,d) -> (B,H,L,d)
  auto heads = [&](const Var& x, int64_t L, int64_t d) {
    return permute(reshape(x, {B, L, H, d}), {0, 2, 1, 3});
  };
  Var Q = heads(Qp, T, dk);  // (B,H,T,d_k)
  Var K = heads(Kp, S, dk);  // (B,H,S,d_k)
  Var V = heads(Vp, S, dv);  // (B,H,S,d_v)
  Var scores =
      matmul(Q, K, false, true) * (real(1) / std::sqrt(static_cast<real>(dk)));  // (B,H,T,S)
  if (score_bias.defined()) scores = scores + score_bias;
  scores = scores + Var(additive_mask(mask, B, T, S));
  Var O = matmul(softmax(scores), V);                         // (B,H,T,d_v)
  Var merged = reshape(permute(O, {0, 2, 1, 3}), {B, T, D});  // (B,T,D)
  return matmul(merged, wo, false, true) + bo;
}

// xq (B,T,D), xkv (B,S,D); p = {wq, bq, wk, bk, wv, bv, wo, bo}, wq and wk
// (H*d_k, D), wv and wo (D, D): the query/key head size d_k is read off wq,
// the value head size is d_v = D / H.
inline Var composed_attention(const Var& xq, const Var& xkv, const std::vector<Var>& p, int64_t H,
                              const nn::AttentionMask& mask) {
  auto proj = [](const Var& x, const Var& w, const Var& b) {
    return matmul(x, w, false, true) + b;
  };
  return composed_heads(proj(xq, p[0], p[1]), proj(xkv, p[2], p[3]), proj(xkv, p[4], p[5]), p[6],
                        p[7], H, mask);
}

// x (B,L,Hkv*d) -> (B,L,H*d): key/value head g repeated for each query head
// h = g*G .. g*G + G-1 of its group (G = H / Hkv), by a product with the 0/1
// matrix R (Hkv, H), R[g][h] = 1 when h / G == g, so its gradient is the sum
// over the group (R^T). torch's repeat_interleave(G, dim=head).
inline Var repeat_kv_heads(const Var& x, int64_t Hkv, int64_t H) {
  const int64_t B = x.size(0), L = x.size(1), d = x.size(2) / Hkv, G = H / Hkv;
  Tensor R = Tensor::zeros({Hkv, H});
  for (int64_t h = 0; h < H; ++h) R.data()[(h / G) * H + h] = 1;
  Var heads = reshape(x, {B * L, Hkv, d});  // (B*L, Hkv, d)
  Var rep =
      matmul(heads, Var(R), /*trans_a=*/true, false);   // (B*L, d, Hkv) x (Hkv, H) -> (B*L, d, H)
  return reshape(transpose(rep, 1, 2), {B, L, H * d});  // (B*L, H, d) -> (B,L,H*d)
}

// Grouped-query attention with rotary positions, from primitive ops and
// nn::rope: p as composed_attention but wk (Hkv*d_k, D), bk (Hkv*d_k), wv
// (Hkv*d_v, D), bv (Hkv*d_v). rope_base 0: no rotation; else Q's and K's heads
// rotated by positions pos0 + t (self-attention).
inline Var composed_gqa_attention(const Var& xq, const Var& xkv, const std::vector<Var>& p,
                                  int64_t H, int64_t Hkv, real rope_base, int64_t pos0,
                                  const nn::AttentionMask& mask, const Var& score_bias = Var()) {
  auto proj = [](const Var& x, const Var& w, const Var& b) {
    return matmul(x, w, false, true) + b;
  };
  Var Q = proj(xq, p[0], p[1]);   // (B,T,H*d_k)
  Var K = proj(xkv, p[2], p[3]);  // (B,S,Hkv*d_k)
  Var V = proj(xkv, p[4], p[5]);  // (B,S,Hkv*d_v)
  if (rope_base != 0) {
    Q = nn::rope(Q, H, rope_base, pos0);
    K = nn::rope(K, Hkv, rope_base, pos0);
  }
  return composed_heads(Q, repeat_kv_heads(K, Hkv, H), repeat_kv_heads(V, Hkv, H), p[6], p[7], H,
                        mask, score_bias);
}

}  // namespace qkv::testing
