// The standard heads' kernel of the fused attention op (nn/attention.h):
// per sequence b and head h,
//   Z   = scale Q_h K_h^T + M                (T, S)    scores; M = -inf where the mask hides a key
//   P   = softmax(Z), row by row             (T, S)    kept for backward
//   O_h = P V_h                              (T, d_v)
// (Q_h, K_h have d_k columns, V_h and O_h d_v = D / H) and its backward from dO_h, each step a
// matrix product C = A B, whose gradients are dA = dC B^T and dB = A^T dC, except the softmax:
//   dV_h = P^T dO_h                          (S, T) x (T, d_v) -> (S, d_v)
//   dP   = dO_h V_h^T                        (T, d_v) x (d_v, S) -> (T, S)
//   dZ   = P * (dP - rowsum(dP * P))         (T, S), * elementwise
//          One row: p = softmax(z) has dp_j/dz_i = p_j (delta_ij - p_i), so
//          dz_i = sum_j dp_j p_j (delta_ij - p_i) = p_i (dp_i - sum_j dp_j p_j).
//          It needs P only. A hidden key has p = 0, so its dZ is 0: the mask
//          needs no test in backward.
//   dQ_h = scale dZ K_h                      (T, S) x (S, d_k) -> (T, d_k)
//   dK_h = scale dZ^T Q_h                    (S, T) x (T, d_k) -> (S, d_k)
// docs/attention-backward.md derives every step at length.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/blas.h"
#include "core/parallel.h"
#include "core/reduce.h"
#include "core/thread_scratch.h"
#include "nn/attention_internal.h"

namespace qkv::nn::detail {

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

// ---- Forward ----------------------------------------------------------------------------

// For every sequence b and head h:  Z = scale Q_h K_h^T + M,  P = softmax(Z),
// O_h = P V_h. Writes P (B,H,T,S) and O (B*T, D), head h into its d_v columns.
void attention_forward(real* P, real* O, const QKVColumns& in, const AttentionMask& mask,
                       const AttentionSizes& dims, real scale) {
  const int64_t T = dims.T, S = dims.S, D = dims.D, H = dims.H, d_k = dims.d_k, d_v = dims.d_v;
  parallel_for(
      dims.B * H,
      [&](int64_t bh0, int64_t bh1) {
        for (int64_t bh = bh0; bh < bh1; ++bh) {
          const int64_t b = bh / H, h = bh % H;
          const real* Qh = in.Q + b * T * in.ldq + h * d_k;   // (T, d_k), row stride ldq
          const real* Kh = in.K + b * S * in.ldkv + h * d_k;  // (S, d_k), row stride ldkv
          const real* Vh = in.V + b * S * in.ldkv + h * d_v;  // (S, d_v), row stride ldkv
          real* Pbh = P + bh * T * S;                         // (T, S): Z, then P in place
          real* Oh = O + b * T * D + h * d_v;                 // (T, d_v), row stride D
          // Z = scale Q_h K_h^T            (T, d_k) x (d_k, S) -> (T, S)
          gemm(false, true, T, S, d_k, scale, Qh, in.ldq, Kh, in.ldkv, 0, Pbh, S);
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

// ---- Backward ---------------------------------------------------------------------------

// For every sequence b and head h, from dO (B*T, D), P (B,H,T,S) and the
// projections `in`: writes dQ, dK, dV in the layout of `in`. When O_again is
// not null (forward did not keep O), also remakes O (B*T, D) there.
void attention_backward(const QKVGradColumns& grad, real* O_again, const real* dO, const real* P,
                        const QKVColumns& in, const AttentionSizes& dims, real scale) {
  const int64_t T = dims.T, S = dims.S, D = dims.D, H = dims.H, d_k = dims.d_k, d_v = dims.d_v;
  ThreadScratch scratch(T * S);  // one (T, S) block per thread: dP, then dZ in place
  parallel_for(
      dims.B * H,
      [&](int64_t bh0, int64_t bh1) {
        real* dP = scratch.mine();  // (T, S)
        for (int64_t bh = bh0; bh < bh1; ++bh) {
          const int64_t b = bh / H, h = bh % H;
          const real* Pbh = P + bh * T * S;                   // (T, S)
          const real* Qh = in.Q + b * T * in.ldq + h * d_k;   // (T, d_k), row stride ldq
          const real* Kh = in.K + b * S * in.ldkv + h * d_k;  // (S, d_k), row stride ldkv
          const real* Vh = in.V + b * S * in.ldkv + h * d_v;  // (S, d_v), row stride ldkv
          const real* dOh = dO + b * T * D + h * d_v;         // (T, d_v), row stride D
          real* dQh = grad.dQ + b * T * grad.ldq + h * d_k;   // (T, d_k), row stride ldq
          real* dKh = grad.dK + b * S * grad.ldkv + h * d_k;  // (S, d_k), row stride ldkv
          real* dVh = grad.dV + b * S * grad.ldkv + h * d_v;  // (S, d_v), row stride ldkv
          // O_h = P V_h again, when forward did not keep O (dWo needs it)
          //                      (T, S) x (S, d_v) -> (T, d_v), row stride D
          if (O_again)
            gemm(false, false, T, d_v, S, 1, Pbh, S, Vh, in.ldkv, 0, O_again + b * T * D + h * d_v,
                 D);

          // forward: O_h = P V_h
          //   dP = dO_h V_h^T        (T, d_v) x (d_v, S) -> (T, S)
          gemm(false, true, T, S, d_v, 1, dOh, D, Vh, in.ldkv, 0, dP, S);
          //   dV_h = P^T dO_h        (S, T) x (T, d_v) -> (S, d_v)
          gemm(true, false, S, d_v, T, 1, Pbh, S, dOh, D, 0, dVh, grad.ldkv);

          // forward: P = softmax(Z)
          //   dZ = P * (dP - rowsum(dP * P))          (T, S), in place over dP
          softmax_backward_in_place(dP, Pbh, T, S);
          const real* dZ = dP;

          // forward: Z = scale Q_h K_h^T + M  (M is a constant)
          //   dQ_h = scale dZ K_h    (T, S) x (S, d_k) -> (T, d_k)
          gemm(false, false, T, d_k, S, scale, dZ, S, Kh, in.ldkv, 0, dQh, grad.ldq);
          //   dK_h = scale dZ^T Q_h  (S, T) x (T, d_k) -> (S, d_k)
          gemm(true, false, S, d_k, T, scale, dZ, S, Qh, in.ldq, 0, dKh, grad.ldkv);
        }
      },
      /*grain=*/2);
}

}  // namespace qkv::nn::detail
