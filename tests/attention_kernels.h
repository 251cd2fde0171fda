// Helpers for the tests of the attention kernels (tests/test_attention_kernels*.cpp):
// the fused op with a chosen kernel, the sparse pattern as a dense mask tensor,
// and linear attention composed from primitive autograd ops.
#pragma once
#include <vector>

#include "autograd/ops.h"
#include "nn/attention.h"

namespace qkv::testing {

// xq (B,T,D), xkv (B,S,D); p = {wq, bq, wk, bk, wv, bv, wo, bo}, wq and wk
// (H*d_k, D): the query/key head size is read off wq.
inline Var attention_with(const Var& xq, const Var& xkv, const std::vector<Var>& p, int64_t H,
                          const nn::AttentionMask& mask, nn::AttentionKernel kernel,
                          nn::SparsePattern sparse = {}) {
  nn::AttentionOptions o;
  o.heads = H;
  o.d_k = p[0].size(0) / H;  // wq (H*d_k, D)
  o.mask = mask;
  o.kernel = kernel;
  o.sparse = sparse;
  return nn::multi_head_attention(xq, xkv, {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]}, o).out;
}

// The mask tensor (B,T,S), nonzero = hidden, that gives the standard kernel
// the sparse kernel's keys: the pattern and the mask's causal and padding.
inline Tensor sparse_as_mask(const nn::SparsePattern& p, const nn::AttentionMask& m, int64_t B,
                             int64_t T, int64_t S) {
  Tensor t = Tensor::zeros({B, T, S});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j)
        if (!p.visible(i, j) || m.hidden(b, i, j, T, S)) t.data()[(b * T + i) * S + j] = 1;
  return t;
}

// phi(x) = elu(x) + 1 = relu(x) + exp(x - relu(x)), from primitive ops.
inline Var elu_plus_one(const Var& x) { return relu(x) + exp(x - relu(x)); }

// Linear attention from primitive ops (p as attention_with's): per head, A = phi(Q) phi(K)^T with
// the hidden keys' entries multiplied by 0, O = (A V) / rowsum(A) (a row with no visible key: its
// sum is replaced by 1, giving 0). The (T, S) matrix A is formed, which the fused kernel never
// does.
inline Var composed_linear_attention(const Var& xq, const Var& xkv, const std::vector<Var>& p,
                                     int64_t H, const nn::AttentionMask& mask) {
  const int64_t B = xq.size(0), T = xq.size(1), S = xkv.size(1), D = xq.size(2);
  const int64_t dk = p[0].size(0) / H, dv = D / H;  // wq (H*d_k, D)
  auto proj = [](const Var& x, const Var& w, const Var& b) {
    return matmul(x, w, false, true) + b;
  };
  auto heads = [&](const Var& x, int64_t L, int64_t d) {
    return permute(reshape(x, {B, L, H, d}), {0, 2, 1, 3});  // (B,H,L,d)
  };
  Var Qf = elu_plus_one(heads(proj(xq, p[0], p[1]), T, dk));   // (B,H,T,d_k)
  Var Kf = elu_plus_one(heads(proj(xkv, p[2], p[3]), S, dk));  // (B,H,S,d_k)
  Var V = heads(proj(xkv, p[4], p[5]), S, dv);                 // (B,H,S,d_v)
  Tensor keep = Tensor::zeros({B, 1, T, S});                   // 1 where visible
  Tensor empty_row = Tensor::zeros({B, 1, T, 1});              // 1 where a row sees nothing
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i) {
      bool any = false;
      for (int64_t j = 0; j < S; ++j)
        if (!mask.hidden(b, i, j, T, S)) keep.data()[(b * T + i) * S + j] = 1, any = true;
      if (!any) empty_row.data()[b * T + i] = 1;
    }
  Var A = matmul(Qf, Kf, false, true) * Var(keep);            // (B,H,T,S)
  Var den = sum(A, 3, true) + Var(empty_row);                 // (B,H,T,1)
  Var O = matmul(A, V) / den;                                 // (B,H,T,d_v)
  Var merged = reshape(permute(O, {0, 2, 1, 3}), {B, T, D});  // (B,T,D)
  return proj(merged, p[6], p[7]);
}

}  // namespace qkv::testing
