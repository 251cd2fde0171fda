// Multi-head attention (Vaswani et al., section 3.2) as one fused op with a
// hand-written backward, read top to bottom:
//   1. the maths: forward, and the derivation of the backward (the one
//      derivation in the code; docs/attention-backward.md tells it at length)
//   2. attention_forward    the standard heads' kernel: scores, mask, softmax, P V
//   3. attention_backward   its backward: dP, dV, the softmax backward, dQ, dK
//   4. AttentionNode        the autograd adapter: what forward saves, and a
//                           backward that calls the kernels
//   5. multi_head_attention the public op: projections, heads, output projection
// Elsewhere, so that this file holds only the story (nn/attention_internal.h
// lists them): the module holding Wq, Wk, Wv, Wo (MultiHeadAttention,
// nn/attention_module.cpp), the argument checks, masks and kernel choice
// (nn/attention_options.cpp), the stacked input projections Q, K, V and their
// backward (nn/attention_projections.cpp), and the other heads' kernels:
// memory-efficient (nn/attention_blocks.cpp), sparse (nn/attention_sparse.cpp)
// and linear (nn/attention_linear.cpp).
#include "nn/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/reduce.h"
#include "core/thread_scratch.h"
#include "nn/attention_internal.h"
#include "nn/relative_bias.h"
#include "nn/rope.h"

namespace qkv::nn {

using detail::AttentionSizes;
using detail::HeadOutputs;
using detail::InputGrads;
using detail::InputProjectionGrads;
using detail::InputProjections;

// ============================================================================
// 1. The maths
// ============================================================================
// Sizes: B batch, T query (target) length, S key (source) length, D d_model,
// H heads, d_k the query/key head size (D / H unless set apart, Table 3 row
// B), d_v = D / H the value head size, E = H*d_k.
//
// Forward. xq (B,T,D) gives the queries, xkv (B,S,D) the keys and values
// (the same tensor for self-attention):
//   Q = xq Wq^T + bq                         (B*T, E)
//   K = xkv Wk^T + bk                        (B*S, E)
//   V = xkv Wv^T + bv                        (B*S, D)
//   per sequence b and head h, with Q_h, K_h the h-th block of d_k columns
//   and V_h the h-th block of d_v columns:
//     Z   = Q_h K_h^T / sqrt(d_k) + M        (T, S)    scores; M = -inf where the mask hides a key
//                                                      (the scale 1/sqrt(d_k) unless options say)
//     P   = softmax(Z), row by row           (T, S)    kept for backward
//     O_h = P V_h                            (T, d_v)
//   Y = O Wo^T + bo                          (B*T, D), O = concat_h(O_h) (B*T, H*d_v = D)
// The scores are called Z (and their gradient dZ) because S is the key length.
//
// Backward, from dY (B*T, D). Each step but the softmax is a matrix product
// C = A B, whose gradients are dA = dC B^T and dB = A^T dC:
//   dO   = dY Wo,  dWo = dY^T O,  dbo = sum of dY's rows
//   dV_h = P^T dO_h                          (S, T) x (T, d_v) -> (S, d_v)
//   dP   = dO_h V_h^T                        (T, d_v) x (d_v, S) -> (T, S)
//   dZ   = P * (dP - rowsum(dP * P))         (T, S), * elementwise
//          One row: p = softmax(z) has dp_j/dz_i = p_j (delta_ij - p_i), so
//          dz_i = sum_j dp_j p_j (delta_ij - p_i) = p_i (dp_i - sum_j dp_j p_j).
//          It needs P only. A hidden key has p = 0, so its dZ is 0: the mask
//          needs no test in backward.
//   dQ_h = dZ K_h / sqrt(d_k)                (T, S) x (S, d_k) -> (T, d_k)
//   dK_h = dZ^T Q_h / sqrt(d_k)              (S, T) x (T, d_k) -> (S, d_k)
//   dxq  = dQ Wq,          dWq = dQ^T xq,    dbq = sum of dQ's rows
//   dxkv = dK Wk + dV Wv,  dWk = dK^T xkv,   dWv = dV^T xkv,  dbk, dbv likewise
// For self-attention xq and xkv are one tensor, and its gradient is the sum
// of all three. docs/attention-backward.md derives every step at length.
//
// Grouped-query attention (K = Hkv key/value heads, G = H / K query heads
// each): query head h reads K_g, V_g with g = h / G, so in backward the
// shared head's gradients add over its group,
//   dK_g = sum_{h in g} dZ_h^T Q_h / sqrt(d_k),   dV_g = sum_{h in g} P_h^T dO_h
// (a head read G times gets the sum of G gradients; docs/gqa-backward.md).
// Rotary positions: Q and K are rotated right after the projections,
// Q_rot = R Q, K_rot = R K (R orthogonal, nn/rope.h); the kernels attend with
// the rotated ones, and backward turns their gradients back, dQ = R^T dQ_rot,
// dK = R^T dK_rot, before the projections' backward (docs/rope-backward.md).
//
// T5's relative position bias (nn/relative_bias.h): Z += B_h with B_h[i,j] =
// table[h, bucket(j - i)], a constant pattern of one learned table (H,
// buckets); each table entry is added to many scores, so its gradient is the
// sum of their dZ, dtable[h, k] = sum_b sum_{(i,j): bucket(j-i) = k} dZ[b,h,i,j]:
// summed per diagonal j - i while dZ is at hand, then added into the buckets
// (docs/relative-bias-backward.md).
//
// Heads are never copied out: head h of Q is the column block
// [h*d_k, (h+1)*d_k) of the (B*T, E) matrix (or of a wider stacked one), which
// sgemm reads in place, the matrix's row stride as its leading dimension.

// ============================================================================
// 2. Forward kernel: the standard heads' kernel
// ============================================================================

namespace detail {
namespace {

// Z += M for sequence b: every hidden score of Z (T, S) becomes -inf. Causal
// masking and key padding hide a suffix of each row; a boolean mask is
// checked element by element.
void hide_masked_scores(const AttentionMask& mask, int64_t b, int64_t T, int64_t S, real* Z) {
  const real neg_inf = -std::numeric_limits<real>::infinity();
  const int64_t len = mask.key_lengths.empty() ? S : mask.key_lengths[b];
  for (int64_t i = 0; i < T; ++i) {
    real* row = Z + i * S;  // (S)
    const int64_t visible = std::min(len, mask.causal ? i + 1 : S);
    for (int64_t j = std::max<int64_t>(visible, 0); j < S; ++j) row[j] = neg_inf;
    if (mask.mask.defined())
      for (int64_t j = 0; j < S; ++j)
        if (mask.hidden(b, i, j, T, S)) row[j] = neg_inf;
  }
}

}  // namespace

// For every sequence b and head h:  Z = scale Q_h K_h^T + M,  P = softmax(Z),
// O_h = P V_h. Writes P (B,H,T,S) and O (B*T, D), head h into its d_v columns.
void attention_forward(real* P, real* O, const QKVColumns& in, const AttentionMask& mask,
                       const AttentionSizes& dims, real scale, const real* bias) {
  const int64_t T = dims.T, S = dims.S, D = dims.D, H = dims.H, d_k = dims.d_k, d_v = dims.d_v;
  parallel_for(
      dims.B * H,
      [&](int64_t bh0, int64_t bh1) {
        for (int64_t bh = bh0; bh < bh1; ++bh) {
          const int64_t b = bh / H, h = bh % H, g = dims.kv_head(h);  // g: its key/value head
          const real* Qh = in.Q + b * T * in.ldq + h * d_k;           // (T, d_k), row stride ldq
          const real* Kh = in.K + b * S * in.ldkv + g * d_k;          // (S, d_k), row stride ldkv
          const real* Vh = in.V + b * S * in.ldkv + g * d_v;          // (S, d_v), row stride ldkv
          real* Pbh = P + bh * T * S;                                 // (T, S): Z, then P in place
          real* Oh = O + b * T * D + h * d_v;                         // (T, d_v), row stride D
          // Z = scale Q_h K_h^T            (T, d_k) x (d_k, S) -> (T, S)
          gemm(false, true, T, S, d_k, scale, Qh, in.ldq, Kh, in.ldkv, 0, Pbh, S);
          // Z += B_h                       relative bias: row i adds diagonals T-1-i ..
          if (bias) add_diagonal_bias(Pbh, S, T, S, bias + h * (T + S - 1) + (T - 1));
          // Z += M                         hidden scores -> -inf
          hide_masked_scores(mask, b, T, S, Pbh);
          // P = softmax(Z), row by row     (T, S); a fully hidden row becomes zeros
          softmax_rows(Pbh, T, S);
          // O_h = P V_h                    (T, S) x (S, d_v) -> (T, d_v)
          gemm(false, false, T, d_v, S, 1, Pbh, S, Vh, in.ldkv, 0, Oh, D);
        }
      },
      /*grain=*/2);
}

// ============================================================================
// 3. Backward kernel
// ============================================================================

namespace {

// Softmax backward of a (T, S) block, in place: dP in, dZ out, row by row,
//   dZ = P * (dP - rowsum(dP * P)).
// The formula of core's softmax_backward (core/reduce.cpp), which makes a new
// tensor for its result; here dZ overwrites dP in a per-thread scratch block.
void softmax_backward_in_place(real* d, const real* P, int64_t T, int64_t S) {
  for (int64_t i = 0; i < T; ++i) {
    real* r = d + i * S;         // (S): dP's row in, dZ's row out
    const real* pr = P + i * S;  // (S)
    real dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < S; ++j) dot += r[j] * pr[j];
#pragma omp simd
    for (int64_t j = 0; j < S; ++j) r[j] = pr[j] * (r[j] - dot);
  }
}

}  // namespace

// For every sequence b and head h, from dO (B*T, D), P (B,H,T,S) and the
// projections `in`: writes dQ, dK, dV in the layout of `in`. When O_again is
// not null (forward did not keep O), also remakes O (B*T, D) there.
// With grouped-query attention key/value head g serves the query heads
// h = g*G .. g*G + G-1 (G = H / Hkv), so its gradients are sums over them:
//   dK_g = sum_h scale dZ_h^T Q_h,   dV_g = sum_h P_h^T dO_h.
// One task per (sequence, key/value head) loops over its group, the first
// head writing (beta 0), the others adding (beta 1): no two threads write
// the same dK_g. Without groups (G = 1) this is one head per task, as before.
// dbias (B, H, T+S-1), when not null: each head's dZ summed along its
// diagonals, row (b, h) written by the one task that owns head h of sequence b.
void attention_backward(const QKVGradColumns& grad, real* O_again, const real* dO, const real* P,
                        const QKVColumns& in, const AttentionSizes& dims, real scale, real* dbias) {
  const int64_t T = dims.T, S = dims.S, D = dims.D, H = dims.H, d_k = dims.d_k, d_v = dims.d_v;
  const int64_t Hkv = dims.Hkv, G = dims.group();
  ThreadScratch scratch(T * S);  // one (T, S) block per thread: dP, then dZ in place
  parallel_for(
      dims.B * Hkv,
      [&](int64_t bg0, int64_t bg1) {
        real* dP = scratch.mine();  // (T, S)
        for (int64_t bg = bg0; bg < bg1; ++bg) {
          const int64_t b = bg / Hkv, g = bg % Hkv;
          const real* Kh = in.K + b * S * in.ldkv + g * d_k;  // (S, d_k), row stride ldkv
          const real* Vh = in.V + b * S * in.ldkv + g * d_v;  // (S, d_v), row stride ldkv
          real* dKh = grad.dK + b * S * grad.ldkv + g * d_k;  // (S, d_k), row stride ldkv
          real* dVh = grad.dV + b * S * grad.ldkv + g * d_v;  // (S, d_v), row stride ldkv
          for (int64_t h = g * G; h < (g + 1) * G; ++h) {
            const real beta = h == g * G ? 0 : 1;  // the group's first head writes, the rest add
            const real* Pbh = P + (b * H + h) * T * S;         // (T, S)
            const real* Qh = in.Q + b * T * in.ldq + h * d_k;  // (T, d_k), row stride ldq
            const real* dOh = dO + b * T * D + h * d_v;        // (T, d_v), row stride D
            real* dQh = grad.dQ + b * T * grad.ldq + h * d_k;  // (T, d_k), row stride ldq
            // O_h = P V_h again, when forward did not keep O (dWo needs it)
            //                      (T, S) x (S, d_v) -> (T, d_v), row stride D
            if (O_again)
              gemm(false, false, T, d_v, S, 1, Pbh, S, Vh, in.ldkv, 0,
                   O_again + b * T * D + h * d_v, D);

            // forward: O_h = P V_h
            //   dP = dO_h V_h^T        (T, d_v) x (d_v, S) -> (T, S)
            gemm(false, true, T, S, d_v, 1, dOh, D, Vh, in.ldkv, 0, dP, S);
            //   dV_g (+)= P^T dO_h     (S, T) x (T, d_v) -> (S, d_v)
            gemm(true, false, S, d_v, T, 1, Pbh, S, dOh, D, beta, dVh, grad.ldkv);

            // forward: P = softmax(Z)
            //   dZ = P * (dP - rowsum(dP * P))          (T, S), in place over dP
            softmax_backward_in_place(dP, Pbh, T, S);
            const real* dZ = dP;

            // forward: Z += B_h (relative bias): dB_h = dZ, summed per diagonal j - i
            if (dbias) {
              real* dd = dbias + (b * H + h) * (T + S - 1);  // (T+S-1)
              std::fill(dd, dd + T + S - 1, real(0));
              sum_diagonals(dZ, S, T, S, dd + (T - 1));
            }

            // forward: Z = scale Q_h K_g^T + M  (M is a constant)
            //   dQ_h = scale dZ K_g    (T, S) x (S, d_k) -> (T, d_k)
            gemm(false, false, T, d_k, S, scale, dZ, S, Kh, in.ldkv, 0, dQh, grad.ldq);
            //   dK_g (+)= scale dZ^T Q_h  (S, T) x (T, d_k) -> (S, d_k)
            gemm(true, false, S, d_k, T, scale, dZ, S, Qh, in.ldq, beta, dKh, grad.ldkv);
          }
        }
      },
      /*grain=*/2);
}

}  // namespace detail

// ============================================================================
// 4. The autograd adapter
// ============================================================================

// Saves exactly what backward needs: the inputs and weights for the
// projections' gradients, the projections Q, K, V, and what the heads'
// kernel needs: the probabilities P (standard), each row's log-sum-exp lse
// (memory-efficient, sparse), nothing more (linear); and the head outputs O,
// which the standard kernel keeps only when the memory policy says
// (nn/attention_internal.h; otherwise backward makes O again from P and V).
// These are tensors forward made anyway, shared, not copied; the one copy is
// the weight stack ([Wq; Wk; Wv], or [Wk; Wv] for cross-attention) that
// project_inputs makes when the caller's weights are not already rows of one
// buffer, kept until backward.
struct AttentionNode : Node {
  AttentionSizes dims{};
  bool has_bias = false;
  AttentionKernel kernel = AttentionKernel::Standard;  // never Auto
  real scale = 1;
  AttentionMask mask;  // the blocks, sparse and linear kernels mask again in backward
  SparsePattern sparse;
  Tensor xq, xkv;                         // (B,T,D), (B,S,D)
  InputProjections in;                    // stacked weights and Q, K, V
  Tensor P;                               // (B,H,T,S), standard kernel
  Tensor lse;                             // (B,H,T), memory-efficient and sparse kernels
  Tensor O;                               // (B*T, D), or undefined: recompute (standard kernel)
  Tensor wo;                              // (D, D)
  std::shared_ptr<const RopeTable> rope;  // positions [pos0, pos0 + T) when rotating
  bool rotates = false;   // rotary positions on (kept after release_saved, for doc())
  bool relative = false;  // T5's relative bias: the last input is its table
  RelativeLayout rel{};   // its buckets and positions
  Tensor rel_diag;        // (H, T+S-1) the bias by diagonal (memory-efficient)
  const char* name() const override { return "multi_head_attention"; }
  OpDoc doc() const override {
    // T5's relative position bias: a table entry per head per bucket added to the scores
    if (relative)
      return {
          "Y = concat_h(softmax(Q_h K_g^T / sqrt(d_k) + table[h, bucket(j - i)] + mask) V_g) "
          "Wo^T + bo,  g = h / (H/K),  the table (H, buckets) shared by the stack's layers",
          "dtable[h, k] = sum over b and the (i, j) with bucket(j - i) = k of dZ[b, h, i, j],  "
          "dZ = P * (dP - rowsum(dP * P)),  dQ, dK, dV as without the bias",
          "docs/relative-bias-backward.md#backward-step-by-step"};
    // Grouped-query attention or rotary positions: the same op with shared
    // key/value heads g = h / (H/K) and rotated Q, K, and their backward rule.
    if (dims.Hkv != dims.H || rotates)
      return {
          "Y = concat_h(softmax((R Q_h) (R K_g)^T / sqrt(d_k) + mask) V_g) Wo^T + bo,  g = h / "
          "(H/K),  Q = xq Wq^T + bq, K, V from xkv (K heads), R the rotation (identity "
          "without rope)",
          "dK_g = R^T sum_{h in g} dZ_h^T (R Q_h) / sqrt(d_k),  dV_g = sum_{h in g} P_h^T "
          "dO_h,  dQ_h = R^T dZ_h (R K_g) / sqrt(d_k)",
          "docs/gqa-backward.md#backward-step-by-step"};
    return {
        "Y = concat_h(softmax(Q_h K_h^T / sqrt(d_k) + mask) V_h) Wo^T + bo,  Q = xq Wq^T + bq, K, "
        "V from xkv",
        "dP = dO_h V_h^T,  dZ = P * (dP - rowsum(dP * P)),  dQ_h = dZ K_h / sqrt(d_k),  dK_h = "
        "dZ^T Q_h / sqrt(d_k),  dV_h = P^T dO_h",
        "docs/attention-backward.md#backward-step-by-step"};
  }
  std::vector<std::pair<std::string, Tensor>> inspect() const override { return {{"P", P}}; }

  // forward: the heads' kernel (O_h = attend(Q_h, K_h, V_h) for every head)
  //   dQ, dK, dV from dO, in the stacked layout of Q, K, V
  //   ddiag (B, H, T+S-1): dZ summed per diagonal, when relative (else null)
  void heads_backward(InputProjectionGrads& dproj, real* O_again, const Tensor& dO,
                      const Tensor& O_used, real* ddiag) {
    switch (kernel) {
      case AttentionKernel::Standard:
        detail::attention_backward(dproj.columns(dims), O_again, dO.data(), P.data(),
                                   in.columns(dims), dims, scale, ddiag);
        break;
      case AttentionKernel::MemoryEfficient:
        detail::blockwise_backward(dproj.columns(dims), dO.data(), O_used.data(), lse.data(),
                                   in.columns(dims), mask, dims, scale,
                                   relative ? rel_diag.data() : nullptr, ddiag);
        break;
      case AttentionKernel::Sparse:
        detail::sparse_backward(dproj.columns(dims), dO.data(), O_used.data(), lse.data(),
                                in.columns(dims), mask, sparse, dims, scale);
        break;
      case AttentionKernel::Linear:
        detail::linear_attention_backward(dproj.columns(dims), dO.data(), O_used.data(),
                                          in.columns(dims), mask, dims);
        break;
      case AttentionKernel::Auto:
        break;  // resolved in forward
    }
  }

  TensorList backward(const Tensor& dY) override {
    const int64_t BT = dims.B * dims.T, D = dims.D, E = dims.E(), Ek = dims.Ek(),
                  W = E + Ek + dims.Dv();
    // forward: Y = O Wo^T + bo.  dO = dY Wo and dbo now; dWo = dY^T O after
    // the heads, which make O again when it was not kept.
    const bool recompute_O = !O.defined();
    Tensor O_used = recompute_O ? Tensor::empty({BT, D}) : O;  // (B*T, D)
    Tensor dO = Tensor::empty({BT, D});                        // (B*T, D)
    Tensor dWo = Tensor::empty({D, D});                        // (D, D)
    Tensor dbo = has_bias ? Tensor::empty({D}) : Tensor();     // (D)
    linear_backward(dY.data(), O_used, wo.data(), D, dO.data(), nullptr,
                    has_bias ? dbo.data() : nullptr);  // reads only O_used's shape

    // forward: the heads' kernel.  dQ, dK, dV (and O again if not kept)
    InputProjectionGrads dproj(in, dims);
    Tensor ddiag = relative ? Tensor::empty({dims.B, dims.H, rel.diagonals()}) : Tensor();
    heads_backward(dproj, recompute_O ? O_used.data() : nullptr, dO, O_used,
                   relative ? ddiag.data() : nullptr);
    // forward: Z += table[h, bucket(j - i)]  (relative bias)
    //   dtable[h, k] = sum over b and the diagonals of bucket k of ddiag[b, h, .]
    Tensor dtable;
    if (relative) {
      dtable = Tensor::empty({dims.H, rel.buckets});  // (H, buckets)
      diagonals_to_table(ddiag.data(), dims.B, dims.H, rel, dtable.data());
    }
    // forward: Q_rot = R Q, K_rot = R K (rotary positions)
    //   dQ = R^T dQ_rot, dK = R^T dK_rot: each head turned back, in place
    if (rotates) {
      const detail::QKVGradColumns g = dproj.columns(dims);
      rope_rotate(g.dQ, dims.B * dims.T, dims.H, dims.d_k, g.ldq, *rope, true);
      rope_rotate(g.dK, dims.B * dims.S, dims.Hkv, dims.d_k, g.ldkv, *rope, true);
    }
    //   dWo = dY^T O   (D, B*T) x (B*T, D) -> (D, D)
    linear_backward(dY.data(), O_used, wo.data(), D, nullptr, dWo.data(), nullptr);

    // forward: project_inputs (Q, K, V from xq and xkv)
    //   dxq, dxkv, and dW, db for [Wq; Wk; Wv], [bq; bk; bv]
    InputGrads g = detail::project_inputs_backward(dproj, in, xq, xkv, needs_grad(0), needs_grad(1),
                                                   has_bias, dims);
    // (E, D), (Ek, D), (Dv, D): the row blocks of d[Wq; Wk; Wv] (E+Ek+Dv, D)
    Tensor dWq = g.dW.slice0(0, E), dWk = g.dW.slice0(E, E + Ek), dWv = g.dW.slice0(E + Ek, W);
    TensorList grads;
    if (has_bias) {
      // (E), (Ek), (Dv), of d[bq; bk; bv] (E+Ek+Dv)
      Tensor dbq = g.db.slice0(0, E), dbk = g.db.slice0(E, E + Ek), dbv = g.db.slice0(E + Ek, W);
      grads = {g.dxq, g.dxkv, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo};
    } else {
      grads = {g.dxq, g.dxkv, dWq, dWk, dWv, dWo};
    }
    if (relative) grads.push_back(dtable);
    return grads;
  }
  void release_saved() override {
    xq = xkv = P = lse = O = wo = rel_diag = Tensor();
    in = InputProjections();
    mask = AttentionMask();
    rope.reset();
  }
};

// ============================================================================
// 5. The public op
// ============================================================================

namespace detail {

AttentionResult multi_head_attention(const Var& xq, const Var& xkv, const AttentionWeights& w,
                                     const AttentionOptions& o, HeadOutputs head_outputs) {
  // Every argument checked, and the kernel chosen, before any work (nn/attention_options.cpp)
  const AttentionSizes dims = check_arguments(xq, xkv, w, o.heads, o.d_k, o.kv_heads);
  const int64_t B = dims.B, T = dims.T, S = dims.S, D = dims.D, H = dims.H;
  const bool self = xq.same_as(xkv);
  check_rope(o, dims, self);
  check_mask(o.mask, B, T, S);
  const AttentionKernel kernel = choose_kernel(o, dims);
  check_relative(o, dims, kernel);
  const real scale = o.scale != 0 ? o.scale : real(1) / std::sqrt(static_cast<real>(dims.d_k));
  const bool has_bias = w.bq.defined();
  auto node = make_node<AttentionNode>();

  // Q, K, V  (B*T, E), (B*S, Ek), (B*S, Dv), stacked
  node->in = project_inputs(xq, xkv, self, w, dims);
  const detail::QKVColumns in = node->in.columns(dims);
  // Q_rot = R Q, K_rot = R K: every head of query/key row t turned by the
  // angles of position rope_pos0 + t, in place (self-attention: S = T)
  if (o.rope_base != 0 && T > 0) {
    node->rope = shared_rope_table(T, dims.d_k, o.rope_base, o.rope_pos0);
    node->rotates = true;
    real* QKV = node->in.QKV.data();  // (B*T, E+Ek+Dv): Q at column 0, K at column E
    rope_rotate(QKV, B * T, H, dims.d_k, in.ldq, *node->rope, false);
    rope_rotate(QKV + dims.E(), B * T, dims.Hkv, dims.d_k, in.ldkv, *node->rope, false);
  }
  // B_h[i, j] = table[h, bucket(j - i - rel_pos0)], laid out by diagonal  (H, T+S-1)
  const bool relative = o.rel_bias.defined();
  Tensor rel_diag;
  if (relative) {
    node->relative = true;
    node->rel = {T, S, o.rel_pos0, o.rel_bidirectional, o.rel_bias.size(1), o.rel_max_distance};
    rel_diag = Tensor::empty({H, node->rel.diagonals()});
    relative_bias_diagonals(o.rel_bias.data().data(), H, node->rel, rel_diag.data());
  }
  const real* bias = relative ? rel_diag.data() : nullptr;
  // O_h = attend(Q_h, K_h, V_h)   for every head, by the chosen kernel
  Tensor O = Tensor::empty({B * T, D});  // (B*T, D), head h in columns [h*d_v, (h+1)*d_v)
  Tensor P, lse;
  switch (kernel) {
    case AttentionKernel::Standard:
      // P = softmax(Q_h K_h^T / sqrt(d_k) + M),  O_h = P V_h
      P = Tensor::empty({B, H, T, S});  // (B,H,T,S)
      attention_forward(P.data(), O.data(), in, o.mask, dims, scale, bias);
      break;
    case AttentionKernel::MemoryEfficient:
      lse = Tensor::empty({B, H, T});  // (B,H,T)
      blockwise_forward(lse.data(), O.data(), in, o.mask, dims, scale, bias);
      break;
    case AttentionKernel::Sparse:
      lse = Tensor::empty({B, H, T});  // (B,H,T)
      sparse_forward(lse.data(), O.data(), in, o.mask, o.sparse, dims, scale);
      break;
    case AttentionKernel::Linear:
      linear_attention_forward(O.data(), in, o.mask, dims);
      break;
    case AttentionKernel::Auto:
      break;  // resolved by choose_kernel
  }
  // Y = O Wo^T + bo   (B*T, D) x (D, D) -> (B, T, D)
  Tensor Y = Tensor::empty({B, T, D});  // (B,T,D)
  linear_forward(O, w.wo.data().data(), has_bias ? w.bo.data().data() : nullptr, D, Y.data());

  // Save for backward (shared, not copied); the standard kernel's O only if
  // the memory policy keeps it.
  node->dims = dims;
  node->has_bias = has_bias;
  node->kernel = kernel;
  node->scale = scale;
  if (kernel != AttentionKernel::Standard) node->mask = o.mask;
  node->sparse = o.sparse;
  node->xq = xq.data();
  node->xkv = xkv.data();
  node->wo = w.wo.data();
  node->P = P;
  node->lse = lse;
  if (relative && kernel == AttentionKernel::MemoryEfficient) node->rel_diag = rel_diag;
  const bool keep_O =
      kernel != AttentionKernel::Standard || head_outputs == HeadOutputs::Keep ||
      (head_outputs == HeadOutputs::Auto && attention_keeps_head_outputs(B, T, S, D, H));
  if (keep_O) node->O = O;
  AttentionResult r;
  r.kernel = kernel;
  if (o.keep_probs) r.probs = P;
  VarList inputs = has_bias ? VarList{xq, xkv, w.wq, w.bq, w.wk, w.bk, w.wv, w.bv, w.wo, w.bo}
                            : VarList{xq, xkv, w.wq, w.wk, w.wv, w.wo};
  if (relative) inputs.push_back(o.rel_bias);  // the table's gradient comes last
  r.out = make_result(Y, node, inputs);
  return r;
}

}  // namespace detail

AttentionResult multi_head_attention(const Var& xq, const Var& xkv, const AttentionWeights& w,
                                     const AttentionOptions& o) {
  return detail::multi_head_attention(xq, xkv, w, o, HeadOutputs::Auto);
}

}  // namespace qkv::nn
