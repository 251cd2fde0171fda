// The fused attention op's insides, shared by its files: the sizes, where the
// kernels find Q, K, V and their gradients, the input projections, the four
// heads' kernels and the op's memory policy for the head outputs O. Tests
// and benchmarks include this header; a program using qkv does not need to.
//
//   nn/attention.cpp              the maths, the standard kernel (softmax attention
//                                 keeping P), the Node, the public op, the module
//   nn/attention_options.cpp      masks, kernel names, argument checks, kernel choice
//   nn/attention_projections.cpp  Q, K, V from the inputs (stacked), and back
//   nn/attention_blocks.cpp       softmax attention by key blocks (online softmax)
//   nn/attention_sparse.cpp       local window + global positions, on the blocks
//   nn/attention_linear.cpp       phi(Q) (phi(K)^T V), phi = elu + 1
#pragma once
#include <cmath>
#include <cstdint>

#include "core/real.h"
#include "core/tensor.h"
#include "nn/attention.h"

namespace qkv::nn::detail {

// Sizes: B batch, T query (target) length, S key (source) length, D d_model,
// H heads, d_k the query/key head size (D / H unless set apart), d_v = D / H
// the value head size, Hkv the key/value heads (H unless grouped-query
// attention shares each of them among a group of H / Hkv query heads). Q
// has E = H*d_k columns and O D = H*d_v; K has Ek = Hkv*d_k and V Dv = Hkv*d_v.
// Query head h reads key/value head h / (H / Hkv).
struct AttentionSizes {
  int64_t B, T, S, D, H, d_k, d_v;
  int64_t Hkv = H;                                          // key/value heads, dividing H
  int64_t E() const { return H * d_k; }                     // the width of Q
  int64_t Ek() const { return Hkv * d_k; }                  // the width of K
  int64_t Dv() const { return Hkv * d_v; }                  // the width of V
  int64_t group() const { return H / Hkv; }                 // query heads per key/value head
  int64_t kv_head(int64_t h) const { return h / group(); }  // the K/V head query head h reads
};

// Where the kernels find Q, K and V: the first column of each inside a
// row-major matrix with row stride ldq (Q, B*T rows) or ldkv (K and V, B*S
// rows). Query head h of sequence b is then a (T, d_k) block at
// Q + b*T*ldq + h*d_k; key/value head g an (S, d_k) block at
// K + b*S*ldkv + g*d_k and an (S, d_v) block at V + b*S*ldkv + g*d_v.
struct QKVColumns {
  const real* Q;
  const real* K;
  const real* V;
  int64_t ldq, ldkv;
};

// The same for their gradients, which backward writes in the same layout.
struct QKVGradColumns {
  real* dQ;
  real* dK;
  real* dV;
  int64_t ldq, ldkv;
};

// ---- The arguments (nn/attention_options.cpp) ------------------------------------------
// Each throws one line naming the op and the shapes.

// T5's relative bias: undefined, or a table (H, buckets) with valid buckets
// and maximum distance, rel_pos0 >= 0 and a kernel that takes it.
void check_relative(const AttentionOptions& o, const AttentionSizes& d, AttentionKernel k);
// The sizes, after checking the inputs', weights' and biases' shapes (and
// kv_heads: 0 is heads, else in [1, heads] and dividing heads).
AttentionSizes check_arguments(const Var& xq, const Var& xkv, const AttentionWeights& w,
                               int64_t heads, int64_t d_k_option, int64_t kv_heads = 0);
// Rotary positions: rope_base 0, or > 1 with self-attention, an even d_k
// and rope_pos0 >= 0.
void check_rope(const AttentionOptions& o, const AttentionSizes& d, bool self);
// The mask's key lengths and tensor against the batch and lengths.
void check_mask(const AttentionMask& m, int64_t B, int64_t T, int64_t S);
// The kernel that runs: Auto resolved by the memory budget, and each
// kernel's limits checked.
AttentionKernel choose_kernel(const AttentionOptions& o, const AttentionSizes& d);

// ---- The input projections (nn/attention_projections.cpp) ------------------------------

// The projections that read the same input are stacked, so that one sgemm
// computes them all (E = H*d_k, which is D by default; Ek = Hkv*d_k and
// Dv = Hkv*d_v, E and D without grouped-query attention; W = E + Ek + Dv):
//   self-attention:   QKV = xq [Wq; Wk; Wv]^T + [bq; bk; bv]   (B*T, W)
//   cross-attention:  Q   = xq Wq^T + bq                       (B*T, E)
//                     KV  = xkv [Wk; Wv]^T + [bk; bv]           (B*S, Ek+Dv)
struct InputProjections {
  Tensor W_qkv, QKV;        // self:  [Wq; Wk; Wv] (W, D), QKV (B*T, W)
  Tensor W_q, Q, W_kv, KV;  // cross: Wq (E, D), Q (B*T, E), [Wk; Wv] (Ek+Dv, D), KV (B*S, Ek+Dv)

  bool self() const { return QKV.defined(); }
  QKVColumns columns(const AttentionSizes& d) const {
    const int64_t E = d.E(), Ek = d.Ek(), W = E + Ek + d.Dv();
    if (self()) return {QKV.data(), QKV.data() + E, QKV.data() + E + Ek, W, W};
    return {Q.data(), KV.data(), KV.data() + Ek, E, Ek + d.Dv()};
  }
};

InputProjections project_inputs(const Var& xq, const Var& xkv, bool self, const AttentionWeights& w,
                                const AttentionSizes& dims);

// The projections' gradients, in the stacked layout of forward.
struct InputProjectionGrads {
  Tensor dQKV;     // self (B*T, E+Ek+Dv)
  Tensor dQ, dKV;  // cross (B*T, E), (B*S, Ek+Dv)

  InputProjectionGrads(const InputProjections& p, const AttentionSizes& dims);
  QKVGradColumns columns(const AttentionSizes& d) {
    const int64_t E = d.E(), Ek = d.Ek(), W = E + Ek + d.Dv();
    if (dQKV.defined()) return {dQKV.data(), dQKV.data() + E, dQKV.data() + E + Ek, W, W};
    return {dQ.data(), dKV.data(), dKV.data() + Ek, E, Ek + d.Dv()};
  }
};

struct InputGrads {
  Tensor dxq, dxkv;  // (B,T,D), (B,S,D), or undefined when not wanted
  Tensor dW, db;     // (E+Ek+Dv, D), (E+Ek+Dv) or undefined without biases: rows [q | k | v]
};

InputGrads project_inputs_backward(const InputProjectionGrads& g, const InputProjections& p,
                                   const Tensor& xq, const Tensor& xkv, bool want_dxq,
                                   bool want_dxkv, bool has_bias, const AttentionSizes& dims);

// ---- The heads' kernels -----------------------------------------------------------------
// Each reads Q, K, V through `in` and writes O (B*T, D), head h into its
// columns [h*d_v, (h+1)*d_v); each backward reads dO (B*T, D) and writes
// (overwrites) dQ, dK, dV through `grad`. `scale` multiplies the scores
// (softmax kernels).

// nn/attention.cpp, the standard kernel: P (B,H,T,S) kept. O_again: see attention_backward.
// bias: T5's relative bias by diagonal (H, T+S-1) (nn/relative_bias.h), or
// null; dbias: backward's diagonal sums of dZ (B, H, T+S-1), written, or null.
void attention_forward(real* P, real* O, const QKVColumns& in, const AttentionMask& mask,
                       const AttentionSizes& dims, real scale, const real* bias = nullptr);
void attention_backward(const QKVGradColumns& grad, real* O_again, const real* dO, const real* P,
                        const QKVColumns& in, const AttentionSizes& dims, real scale,
                        real* dbias = nullptr);

// nn/attention_blocks.cpp: lse (B,H,T), each row's log-sum-exp of its visible
// scores (+inf for a row with none), kept instead of P.
inline constexpr int64_t kQueryBlock = 128;  // Br: query rows per block
inline constexpr int64_t kKeyBlock = 128;    // Bc: keys per block
// Bytes of one block's scratch (scores and their gradient, Br x Bc each): the
// least memory budget the memory-efficient kernel accepts.
inline constexpr int64_t kBlockBytes = 2 * kQueryBlock * kKeyBlock * int64_t(sizeof(real));
// bias, dbias: as for the standard kernel.
void blockwise_forward(real* lse, real* O, const QKVColumns& in, const AttentionMask& mask,
                       const AttentionSizes& dims, real scale, const real* bias = nullptr);
void blockwise_backward(const QKVGradColumns& grad, const real* dO, const real* O, const real* lse,
                        const QKVColumns& in, const AttentionMask& mask, const AttentionSizes& dims,
                        real scale, const real* bias = nullptr, real* dbias = nullptr);

// The blocks' engine, which the memory-efficient and sparse kernels share.
// A run is a list of rows of one head: row r sits at base + r * ld and is
// sequence position first + r * step (step > 1: every g-th position, read in
// place with a longer leading dimension). Query row i sees the keys of a key
// run whose positions lie in [lo_i, hi_i):
//   lo_i = window ? i - window + 1 : 0,
//   hi_i = min(visible_keys, causal ? i + 1 : S, window ? i + window : S),
// minus the positions p % skip_every == 0 (those are another run's) and
// those the mask tensor hides; a query run hides every row whose position
// p % hide_every == 0 (another pass computes them).
struct QueryRun {
  const real* Q;   // (n, d_k), row stride ldq
  real* O;         // (n, d_v), row stride ldo; forward writes, backward reads
  const real* dO;  // (n, d_v), row stride ldo; backward only
  real* dQ;        // (n, d_k), row stride ldg; backward adds
  real* lse;       // (n), stride step: each row's log-sum-exp
  int64_t n, ldq, ldo, ldg, first, step, hide_every;
};
struct KeyRun {
  const real* K;  // (n, d_k), row stride ld
  const real* V;  // (n, d_v), row stride ld
  real* dK;       // (n, d_k), row stride ldg; backward adds
  real* dV;       // (n, d_v), row stride ldg; backward adds
  int64_t n, ld, ldg, first, step;
  int64_t window, skip_every;
};
struct RowLimits {
  int64_t S, visible_keys;  // key positions [0, S); those >= visible_keys hidden (padding)
  bool causal;
  const real* mask;  // (T, S) of this sequence, nonzero = hidden, or null
  // T5's relative bias of this head by diagonal, bias[j - i + T - 1] (T+S-1
  // numbers), or null; dbias, backward's diagonal sums of dZ, added into, or
  // null. Runs of step 1 only (the memory-efficient kernel's).
  const real* bias = nullptr;
  real* dbias = nullptr;
  int64_t T = 0;
};
// One query block (at most kQueryBlock rows) against key runs; scratch holds
// blockwise_scratch_size(d_k, d_v) numbers.
int64_t blockwise_scratch_size(int64_t d_k, int64_t d_v);
void query_block_forward(const QueryRun& q, const KeyRun* keys, int64_t n_keys,
                         const RowLimits& lim, int64_t d_k, int64_t d_v, real scale, real* scratch);
void query_block_backward(const QueryRun& q, const KeyRun* keys, int64_t n_keys,
                          const RowLimits& lim, int64_t d_k, int64_t d_v, real scale,
                          real* scratch);
// The gradients the engine's backward adds into, set to 0 for sequence b:
// dQ of query head h, and dK, dV of key/value head g; zero_head_grads does
// both for head h (without grouped-query attention, where g = h).
void zero_query_grads(const QKVGradColumns& g, const AttentionSizes& d, int64_t b, int64_t h);
void zero_key_grads(const QKVGradColumns& g, const AttentionSizes& d, int64_t b, int64_t kv);
void zero_head_grads(const QKVGradColumns& g, const AttentionSizes& d, int64_t b, int64_t h);

// nn/attention_sparse.cpp: lse (B,H,T) as above, over the pattern's keys.
void sparse_forward(real* lse, real* O, const QKVColumns& in, const AttentionMask& mask,
                    const SparsePattern& pattern, const AttentionSizes& dims, real scale);
void sparse_backward(const QKVGradColumns& grad, const real* dO, const real* O, const real* lse,
                     const QKVColumns& in, const AttentionMask& mask, const SparsePattern& pattern,
                     const AttentionSizes& dims, real scale);

// nn/attention_linear.cpp: nothing kept but O; backward remakes phi(Q),
// phi(K) and the key summaries. Its feature map phi(x) = elu(x) + 1 = x + 1
// for x > 0, e^x otherwise, which the KV cache's running sums
// (generation/kv_cache_linear.cpp) use too.
inline real linear_feature(real x) { return x > 0 ? x + 1 : std::exp(x); }
void linear_attention_forward(real* O, const QKVColumns& in, const AttentionMask& mask,
                              const AttentionSizes& dims);
void linear_attention_backward(const QKVGradColumns& grad, const real* dO, const real* O,
                               const QKVColumns& in, const AttentionMask& mask,
                               const AttentionSizes& dims);

// ---- The memory policy for O ------------------------------------------------------------
//
// Backward needs the merged head outputs O (B*T, D) for the output
// projection's weight gradient dWo = dY^T O. The standard kernel can keep O
// until then, or backward can recompute it from the saved P and V (one
// (T,S) x (S,d_v) product per head, B*H in all), which saves B*T*D numbers
// per layer. The other kernels always keep O: their backward reads it.
enum class HeadOutputs { Auto, Keep, Recompute };

// Auto's rule: keep O when it takes no more memory than the probabilities P
// (B,H,T,S) kept anyway, D <= H*S (the small and GPT benchmark shapes), or when
// it is at most kKeptHeadOutputsBytes, too little memory to be worth B*H extra
// small products in backward (tiny: 192 KiB per attention). Otherwise (base:
// 2 MiB per attention, 18 of them) backward recomputes O.
inline constexpr int64_t kKeptHeadOutputsBytes = int64_t{1} << 20;
inline bool attention_keeps_head_outputs(int64_t B, int64_t T, int64_t S, int64_t d_model,
                                         int64_t heads) {
  return d_model <= heads * S ||
         B * T * d_model * static_cast<int64_t>(sizeof(real)) <= kKeptHeadOutputsBytes;
}

// The op with the policy for O chosen by the caller (Auto: the rule above).
// nn::multi_head_attention is this with Auto; tests call it with Keep or
// Recompute to reach both backward paths at any size.
AttentionResult multi_head_attention(const Var& xq, const Var& xkv, const AttentionWeights& w,
                                     const AttentionOptions& o, HeadOutputs head_outputs);

}  // namespace qkv::nn::detail
