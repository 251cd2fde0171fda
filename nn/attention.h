// Multi-head attention (Vaswani et al., section 3.2), fused: one op computes
//   Q = xq Wq^T + bq, K = xkv Wk^T + bk, V = xkv Wv^T + bv
//   per head h:  O_h = attend(Q_h, K_h, V_h)
//   out = concat_h(O_h) Wo^T + bo
// and writes its backward by hand. attend is one of four heads' kernels
// (AttentionKernel), each in a file of its own:
//   standard          P = softmax(Q_h K_h^T / sqrt(d_k) + M), O_h = P V_h,
//                     P (B,H,T,S) kept for backward    nn/attention.cpp
//   memory-efficient  the same numbers by an online softmax over key blocks;
//                     keeps one log-sum-exp per row, remakes P block by block
//                     in backward                      nn/attention_blocks.cpp
//   sparse            softmax attention over a local window plus global
//                     positions only, O(T (w + T/g))   nn/attention_sparse.cpp
//   linear            phi(Q_h) (phi(K_h)^T V_h), phi = elu + 1, normalised;
//                     O(T d_k^2)                       nn/attention_linear.cpp
// Heads are never copied out: head h of Q is the column block [h*d_k, (h+1)*d_k)
// of the (B*T, H*d_k) matrix, which sgemm reads directly with its row stride.
//
// The head sizes: queries and keys have d_k columns per head, values and the
// head outputs d_v = D / H (Table 3 row B of the paper varies d_k at fixed H).
// d_k is D / H unless the options (or the module) say otherwise; then
// Q, K are (B*T, H*d_k), (B*S, H*d_k) and V, O stay (B*S, D), (B*T, D).
//
// Grouped-query attention (Ainslie et al. 2023; kv_heads = 1 is Shazeer's
// multi-query attention): K < H key/value heads, K dividing H, each shared by
// a group of H / K query heads; query head h reads key/value head h / (H/K).
// W_K is (K*d_k, D), W_V (K*d_v, D); K, V are (B*S, K*d_k), (B*S, K*d_v). In
// backward a shared head's gradient is the sum over its group
// (docs/gqa-backward.md).
//
// Rotary positions (RoPE, nn/rope.h) inside the op: with rope_base > 0 every
// head of Q and of K is rotated by its position right after the input
// projections, Q_rot = R_t Q, K_rot = R_s K, and the heads' kernel attends
// with the rotated ones; backward rotates the kernel's dQ_rot, dK_rot back,
// dQ = R_t^T dQ_rot (docs/rope-backward.md). Self-attention only: queries and
// keys sit at positions rope_pos0 + t. The standard and memory-efficient
// kernels take both; the sparse and linear kernels refuse them.
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

// The heads' kernel. Auto: Standard when P (B,H,T,S) fits memory_budget (or
// there is no budget), MemoryEfficient when it does not.
enum class AttentionKernel { Standard, MemoryEfficient, Sparse, Linear, Auto };
const char* to_string(AttentionKernel k);
// "standard", "memory-efficient" (or "flash"), "sparse", "linear", "auto";
// throws naming the accepted words.
AttentionKernel attention_kernel_from_string(const std::string& s);

// Sparse attention's pattern (Longformer / BigBird): query i sees key j when
//   |i - j| < window                      (the local window; with a causal
//                                          mask that is the window keys back,
//                                          i itself included), or
//   j % global_every == 0                 (a global key, seen by every query), or
//   i % global_every == 0                 (a global query, which sees every key),
// and the mask (causal, padding) does not hide it. global_every 0: no global
// positions. The window must be in [1, S].
struct SparsePattern {
  int64_t window = 128;
  int64_t global_every = 64;
  // True when the pattern (not the mask) lets query i see key j.
  bool visible(int64_t i, int64_t j) const;
};

struct AttentionOptions {
  int64_t heads = 1;
  int64_t d_k = 0;  // the query/key head size; 0: D / heads. Values keep d_v = D / heads.
  AttentionMask mask;
  AttentionKernel kernel = AttentionKernel::Standard;
  real scale = 0;  // the scores' factor; 0: 1 / sqrt(d_k) (this d_k)
  // Bytes the kernel may spend on probabilities (P for Standard, one block
  // per thread for MemoryEfficient); 0: no limit. With a budget that cannot
  // hold one block the memory-efficient kernel refuses to run.
  int64_t memory_budget = 0;
  SparsePattern sparse;     // for AttentionKernel::Sparse
  bool keep_probs = false;  // return P (B,H,T,S) in AttentionResult::probs (Standard only)
  // Grouped-query attention: the key/value heads K, dividing heads; 0: heads.
  int64_t kv_heads = 0;
  // Rotary positions: the base of the angles theta_i = base^(-2i/d_k) (10000
  // as in RoFormer and Llama); 0: no rotation. Needs self-attention and an
  // even d_k. Queries and keys sit at positions rope_pos0, rope_pos0 + 1, ...
  real rope_base = 0;
  int64_t rope_pos0 = 0;
  // T5's relative position bias (nn/relative_bias.h): rel_bias, a table (H,
  // buckets), adds rel_bias[h, bucket(j - i - rel_pos0)] to score (i, j) of
  // head h after the scale, before the mask; undefined: no bias. Bidirectional
  // (an encoder) or causal buckets, logarithmic up to rel_max_distance. Its
  // gradient flows (a scatter-add of dZ into the buckets). The standard and
  // memory-efficient kernels take it; the sparse and linear kernels refuse it.
  Var rel_bias;
  bool rel_bidirectional = true;
  int64_t rel_max_distance = 128;
  int64_t rel_pos0 = 0;  // query i sits at position rel_pos0 + i, key j at j
};

// The eight parameters: wq (H*d_k, D), wk (K*d_k, D), wv (K*d_v, D), wo (D, D)
// with K the key/value heads (H by default: wk (H*d_k, D), wv (D, D)); biases
// all undefined, or bq (H*d_k), bk (K*d_k), bv (K*d_v), bo (D).
struct AttentionWeights {
  Var wq, bq, wk, bk, wv, bv, wo, bo;
};

struct AttentionResult {
  Var out;       // (B,T,D)
  Tensor probs;  // (B,H,T,S) when keep_probs was set, else undefined
  AttentionKernel kernel = AttentionKernel::Standard;  // the kernel that ran (Auto resolved)
};

// The fused op. xq (B,T,D), xkv (B,S,D); weights and biases as above (with
// the default d_k all (D,D) and (D)). Throws qkv::Error naming the op and the shapes.
AttentionResult multi_head_attention(const Var& xq, const Var& xkv, const AttentionWeights& w,
                                     const AttentionOptions& o);

class MultiHeadAttention : public Module {
 public:
  // d_k: the query/key head size (W_Q, W_K are (heads*d_k, d_model)); 0 is
  // d_model / heads, the paper's base model. kv_heads: the key/value heads
  // K of grouped-query attention, dividing heads (W_K (K*d_k, d_model), W_V
  // (K*d_v, d_model)); 0 is heads.
  MultiHeadAttention(int64_t d_model, int64_t heads, bool bias = true,
                     Generator& g = default_generator(), int64_t d_k = 0, int64_t kv_heads = 0);
  // Self-attention: forward(x, x, mask); cross-attention: forward(y, memory, mask).
  Var forward(const Var& xq, const Var& xkv, const AttentionMask& mask = {});

  // Keep the attention probabilities of the last forward, (B,H,T,S), for
  // inspection and plotting (off by default: it holds one tensor alive).
  // Only the standard kernel makes them: with keep_attention on, forward
  // runs the standard kernel whatever `kernel` says.
  void keep_attention(bool on) { keep_attention_ = on; }
  const Tensor& last_attention() const { return last_attention_; }
  AttentionWeights weights() const;

  int64_t d_model, heads;
  int64_t d_k;       // query/key head size: W_Q, W_K (heads*d_k, d_model)
  int64_t d_v;       // value head size d_model / heads: W_O (d_model, d_model)
  int64_t kv_heads;  // key/value heads K (heads unless grouped): W_K (K*d_k), W_V (K*d_v) rows
  std::shared_ptr<Linear> w_q, w_k, w_v, w_o;
  // Rotary positions of queries and keys (AttentionOptions::rope_base); 0: off.
  // Self-attention only; the KV cache rotates each new key at its position.
  real rope_base = 0;
  // The heads' kernel forward uses, and its settings. Standard by default.
  // The KV cache (generation/kv_cache.h) decodes with this kernel's maths:
  // softmax over every cached key (Standard, MemoryEfficient, Auto), over the
  // keys the sparse pattern lets a query see (Sparse), or from the running
  // sums of causal linear attention (Linear).
  AttentionKernel kernel = AttentionKernel::Standard;
  int64_t memory_budget = 0;
  SparsePattern sparse;
  // The scores' scale: 0 is the paper's 1/sqrt(d_k); 1 leaves them unscaled
  // (the ablation of section 3.2.1's argument). The linear kernel has none.
  real scale = 0;
  // T5's relative position bias, the stack's shared table (H, buckets)
  // (AttentionOptions::rel_bias); undefined: none. Held, not registered: the
  // stack that owns it registers it once.
  Var rel_bias;
  bool rel_bidirectional = true;
  int64_t rel_max_distance = 128;

 private:
  bool keep_attention_ = false;
  Tensor last_attention_;
};

}  // namespace qkv::nn
