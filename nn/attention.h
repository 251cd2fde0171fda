// Multi-head attention (Vaswani et al., section 3.2), fused: one op computes
//   Q = xq Wq^T + bq, K = xkv Wk^T + bk, V = xkv Wv^T + bv
//   per head h:  P_h = softmax(Q_h K_h^T / sqrt(d_k) + M),  O_h = P_h V_h
//   out = concat_h(O_h) Wo^T + bo
// and writes its backward by hand from the saved probabilities P.
// Heads are never copied out: head h of Q is the column block [h*d_k, (h+1)*d_k)
// of the (B*T, D) matrix, which sgemm reads directly with leading dimension D.
#pragma once
#include <vector>

#include "core/pool.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace qkv::nn {

// Which scores are masked out (set to -inf before the softmax). Combined by OR.
// A query row whose keys are all masked outputs zeros (never NaN).
struct AttentionMask {
  bool causal = false;  // key j hidden from query i when j > i
  // Per sequence b: keys j >= key_lengths[b] hidden; empty: none hidden. A
  // pooled list (core/pool.h): models make their masks anew every forward.
  PoolVector<int64_t> key_lengths;
  Tensor mask;  // optional, nonzero = hidden; (T,S) or (B,T,S)

  static AttentionMask none() { return {}; }
  static AttentionMask causal_mask() { return {true, {}, Tensor()}; }
  static AttentionMask padding(const std::vector<int64_t>& lengths) {
    return {false, {lengths.begin(), lengths.end()}, Tensor()};
  }
  static AttentionMask causal_padding(const std::vector<int64_t>& lengths) {
    return {true, {lengths.begin(), lengths.end()}, Tensor()};
  }
  // True when score (b, i, j) is hidden.
  bool hidden(int64_t b, int64_t i, int64_t j, int64_t T, int64_t S) const;
};

// The fused op. xq (B,T,D), xkv (B,S,D); weights (D,D); biases (D) or all
// undefined. If `probs_out` is non-null it receives P (B,H,T,S).
// (Whether forward keeps the head outputs for backward or backward recomputes
// them is the op's own memory policy: nn/attention_internal.h.)
Var multi_head_attention(const Var& xq, const Var& xkv, const Var& wq, const Var& bq, const Var& wk,
                         const Var& bk, const Var& wv, const Var& bv, const Var& wo, const Var& bo,
                         int64_t heads, const AttentionMask& mask = {},
                         Tensor* probs_out = nullptr);

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t d_model, int64_t heads, bool bias = true,
                     Generator& g = default_generator());
  // Self-attention: forward(x, x, mask); cross-attention: forward(y, memory, mask).
  Var forward(const Var& xq, const Var& xkv, const AttentionMask& mask = {});

  // Keep the attention probabilities of the last forward, (B,H,T,S), for
  // inspection and plotting (off by default: it holds one tensor alive).
  void keep_attention(bool on) { keep_attention_ = on; }
  const Tensor& last_attention() const { return last_attention_; }

  int64_t d_model, heads, d_k;
  std::shared_ptr<Linear> w_q, w_k, w_v, w_o;

 private:
  bool keep_attention_ = false;
  Tensor last_attention_;
};

}  // namespace qkv::nn
