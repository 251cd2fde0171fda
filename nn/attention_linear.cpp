// The linear heads' kernel of the fused attention op (Katharopoulos et al.
// 2020, "Transformers are RNNs"): the softmax's exp(q . k) replaced by
// phi(q) . phi(k) with the feature map phi(x) = elu(x) + 1 (positive, so the
// normaliser never vanishes while a key is visible). Per sequence b and head h,
// with Qf = phi(Q_h) (T, d_k), Kf = phi(K_h) (S, d_k), V_h (S, d_v),
// a_ij = Qf_i . Kf_j:
//   num_i = sum_j a_ij V_j = Qf_i (sum_j Kf_j^T V_j)         (d_v)
//   den_i = sum_j a_ij     = Qf_i . (sum_j Kf_j)             ()
//   O_i   = num_i / den_i
// Non-causal: j over every visible key, one summary KV = Kf^T V (d_k, d_v)
// and z = colsum(Kf) (d_k) for all queries: O(T d_k d_v), no (T, S) anything.
// Causal (T == S): j <= i, by chunks of C rows: the summary of the chunks
// before (a prefix sum) plus the chunk's own (C, C) lower triangle.
// Padding: Kf_j = 0 for hidden keys (j >= the sequence's length); a query
// that sees no key (den = 0) outputs 0. The scale of the options is unused.
//
// Backward, from dO_i (O = num / den):
//   dnum_i = dO_i / den_i,  dden_i = -(dO_i . O_i) / den_i
//   da_ij  = dnum_i . V_j + dden_i                 (for visible j)
//   dQf_i  = sum_j da_ij Kf_j = KV_i dnum_i + dden_i z_i    (KV_i, z_i: i's summaries)
//   dKf_j  = sum_i da_ij Qf_i = R_j V_j + r_j,  R_j = sum_i Qf_i dnum_i^T, r_j = sum_i dden_i Qf_i
//   dV_j   = sum_i a_ij dnum_i = R_j^T Kf_j
// with the sums over the queries that see j (all of them, or a suffix sum
// when causal), and dQ = dQf * phi'(Q), phi'(x) = 1 for x > 0, e^x else.
// docs/long-sequences.md derives it.
#include <algorithm>
#include <cmath>

#include "core/blas.h"
#include "core/parallel.h"
#include "core/thread_scratch.h"
#include "nn/attention_internal.h"

namespace qkv::nn::detail {

namespace {

constexpr int64_t C = 64;  // rows per chunk of the causal kernel

// phi(x) = elu(x) + 1 = x + 1 for x > 0, e^x otherwise; phi'(x) = 1 or e^x.
inline real phi(real x) { return linear_feature(x); }
inline real dphi(real x) { return x > 0 ? real(1) : std::exp(x); }

// dst (n, d_k) = phi(src) (n, d_k), src's row stride ld.
void feature_map(const real* src, int64_t ld, int64_t n, int64_t d_k, real* dst) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < d_k; ++c) dst[r * d_k + c] = phi(src[r * ld + c]);
}

// g (n, d_k) *= phi'(x), both with their row strides: dx = dphi * phi'(x).
void feature_map_backward(real* g, int64_t ldg, const real* x, int64_t ldx, int64_t n,
                          int64_t d_k) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < d_k; ++c) g[r * ldg + c] *= dphi(x[r * ldx + c]);
}

// The scratch of one (b, h), carved from one per-thread block: Qf (T, d_k),
// Kf (S, d_k), dnum (T, d_v), dden, den (T), A, dA (C, C), KV (d_k, d_v),
// z (d_k), R (d_k, d_v), r (d_k).
struct Buffers {
  real *Qf, *Kf, *dnum, *dden, *den, *A, *dA, *KV, *z, *R, *r;
  Buffers(real* s, int64_t T, int64_t S, int64_t d_k, int64_t d_v) {
    Qf = s, Kf = Qf + T * d_k, dnum = Kf + S * d_k, dden = dnum + T * d_v, den = dden + T;
    A = den + T, dA = A + C * C, KV = dA + C * C, z = KV + d_k * d_v, R = z + d_k,
    r = R + d_k * d_v;
  }
  static int64_t size(int64_t T, int64_t S, int64_t d_k, int64_t d_v) {
    return T * d_k + S * d_k + T * d_v + 2 * T + 2 * C * C + 2 * d_k * d_v + 2 * d_k;
  }
};

// The head's views: Q_h (T, d_k), K_h (S, d_k), V_h (S, d_v), O_h and dO_h (T, d_v).
struct Head {
  const real *Q, *K, *V, *dO;
  real* O;
  real *dQ, *dK, *dV;
  int64_t len;  // visible keys
};

// z += colsum(Kf rows [0, n)), z (d_k)
void add_colsum(real* z, const real* Kf, int64_t n, int64_t d_k) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < d_k; ++c) z[c] += Kf[j * d_k + c];
}

// O_i = num_i / den_i for rows [0, n), num already in O (n, d_v), den given; 0 when den is 0.
void divide_rows(real* O, int64_t ldo, const real* den, int64_t n, int64_t d_v) {
  for (int64_t i = 0; i < n; ++i) {
    const real inv = den[i] > 0 ? 1 / den[i] : 0;
    for (int64_t c = 0; c < d_v; ++c) O[i * ldo + c] *= inv;
  }
}

// dnum_i = dO_i / den_i (d_v), dden_i = -(dO_i . O_i) / den_i, rows [0, n).
void output_grads(const Head& h, int64_t ldo, const real* den, int64_t n, int64_t d_v, real* dnum,
                  real* dden) {
  for (int64_t i = 0; i < n; ++i) {
    const real* dO = h.dO + i * ldo;
    const real* O = h.O + i * ldo;
    const real inv = den[i] > 0 ? 1 / den[i] : 0;
    real dot = 0;
    for (int64_t c = 0; c < d_v; ++c) {
      dnum[i * d_v + c] = dO[c] * inv;
      dot += dO[c] * O[c];
    }
    dden[i] = -dot * inv;
  }
}

// A (n, n), row stride C: A = Qf_c Kf_c^T with a_ij = 0 for j > i
void chunk_scores(const real* Qf, const real* Kf, int64_t n, int64_t d_k, real* A) {
  gemm(false, true, n, n, d_k, 1, Qf, d_k, Kf, d_k, 0, A, C);  // (n, d_k) x (d_k, n)
  for (int64_t i = 0; i < n; ++i) std::fill(A + i * C + i + 1, A + i * C + n, real(0));
}

// dA (n, n), row stride C: da_ij = dnum_i . V_j + dden_i for j <= i, else 0
void chunk_score_grads(const real* dnum, const real* dden, const real* V, int64_t ldv, int64_t n,
                       int64_t d_v, real* dA) {
  gemm(false, true, n, n, d_v, 1, dnum, d_v, V, ldv, 0, dA, C);  // (n, d_v) x (d_v, n)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) dA[i * C + j] += dden[i];
    std::fill(dA + i * C + i + 1, dA + i * C + n, real(0));
  }
}

void head_forward(const Head& h, const AttentionSizes& d, int64_t ldq, int64_t ldkv, bool causal,
                  Buffers& s) {
  const int64_t T = d.T, dk = d.d_k, dv = d.d_v, D = d.D, len = h.len;
  feature_map(h.Q, ldq, T, dk, s.Qf);         // Qf = phi(Q_h)  (T, d_k)
  std::fill(s.Kf, s.Kf + d.S * dk, real(0));  // hidden keys: Kf = 0
  feature_map(h.K, ldkv, len, dk, s.Kf);      // Kf = phi(K_h)  (S, d_k)
  std::fill(s.KV, s.KV + dk * dv, real(0));
  std::fill(s.z, s.z + dk, real(0));
  if (!causal) {
    // KV = Kf^T V  (d_k, S) x (S, d_v) -> (d_k, d_v);  z = colsum(Kf)
    gemm(true, false, dk, dv, len, 1, s.Kf, dk, h.V, ldkv, 0, s.KV, dv);
    add_colsum(s.z, s.Kf, len, dk);
    // num = Qf KV  (T, d_k) x (d_k, d_v) -> (T, d_v), into O;  den_i = Qf_i . z
    gemm(false, false, T, dv, dk, 1, s.Qf, dk, s.KV, dv, 0, h.O, D);
    for (int64_t i = 0; i < T; ++i) {
      real den = 0;
      for (int64_t c = 0; c < dk; ++c) den += s.Qf[i * dk + c] * s.z[c];
      s.den[i] = len > 0 ? den : 0;
    }
    divide_rows(h.O, D, s.den, T, dv);
    return;
  }
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int64_t n = std::min(C, T - c0);
    const real *Qf = s.Qf + c0 * dk, *Kf = s.Kf + c0 * dk, *V = h.V + c0 * ldkv;
    real* O = h.O + c0 * D;
    // A = tril(Qf_c Kf_c^T)  (n, n)
    chunk_scores(Qf, Kf, n, dk, s.A);
    // num = Qf_c KV + A V_c  (n, d_k) x (d_k, d_v) + (n, n) x (n, d_v) -> (n, d_v), into O
    gemm(false, false, n, dv, dk, 1, Qf, dk, s.KV, dv, 0, O, D);
    gemm(false, false, n, dv, n, 1, s.A, C, V, ldkv, 1, O, D);
    // den_i = Qf_i . z + rowsum(A_i)
    for (int64_t i = 0; i < n; ++i) {
      real den = 0;
      for (int64_t c = 0; c < dk; ++c) den += Qf[i * dk + c] * s.z[c];
      for (int64_t j = 0; j <= i; ++j) den += s.A[i * C + j];
      s.den[c0 + i] = den;
    }
    divide_rows(O, D, s.den + c0, n, dv);
    // the prefix sums: KV += Kf_c^T V_c  (d_k, n) x (n, d_v);  z += colsum(Kf_c)
    gemm(true, false, dk, dv, n, 1, Kf, dk, V, ldkv, 1, s.KV, dv);
    add_colsum(s.z, Kf, n, dk);
  }
}

void head_backward(const Head& h, const AttentionSizes& d, int64_t ldq, int64_t ldkv, int64_t ldgq,
                   int64_t ldgkv, bool causal, Buffers& s) {
  const int64_t T = d.T, S = d.S, dk = d.d_k, dv = d.d_v, D = d.D, len = h.len;
  // forward again: Qf, Kf, and (non-causal) KV, z, den
  feature_map(h.Q, ldq, T, dk, s.Qf);
  std::fill(s.Kf, s.Kf + S * dk, real(0));
  feature_map(h.K, ldkv, len, dk, s.Kf);
  std::fill(s.KV, s.KV + dk * dv, real(0));
  std::fill(s.z, s.z + dk, real(0));
  std::fill(s.R, s.R + dk * dv, real(0));
  std::fill(s.r, s.r + dk, real(0));
  if (!causal) {
    gemm(true, false, dk, dv, len, 1, s.Kf, dk, h.V, ldkv, 0, s.KV, dv);
    add_colsum(s.z, s.Kf, len, dk);
    for (int64_t i = 0; i < T; ++i) {
      real den = 0;
      for (int64_t c = 0; c < dk; ++c) den += s.Qf[i * dk + c] * s.z[c];
      s.den[i] = len > 0 ? den : 0;
    }
    // forward: O = num / den:  dnum (T, d_v), dden (T)
    output_grads(h, D, s.den, T, dv, s.dnum, s.dden);
    // forward: num = Qf KV, den = Qf z:  dQf = dnum KV^T + dden z^T
    //   (T, d_v) x (d_v, d_k) -> (T, d_k)
    gemm(false, true, T, dk, dv, 1, s.dnum, dv, s.KV, dv, 0, h.dQ, ldgq);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t c = 0; c < dk; ++c) h.dQ[i * ldgq + c] += s.dden[i] * s.z[c];
    // forward: KV = Kf^T V, z = colsum(Kf):  R = Qf^T dnum (d_k, d_v), r = Qf^T dden (d_k)
    gemm(true, false, dk, dv, T, 1, s.Qf, dk, s.dnum, dv, 0, s.R, dv);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t c = 0; c < dk; ++c) s.r[c] += s.dden[i] * s.Qf[i * dk + c];
    //   dKf = V R^T + 1 r^T   (S, d_v) x (d_v, d_k);   dV = Kf R   (S, d_k) x (d_k, d_v)
    gemm(false, true, len, dk, dv, 1, h.V, ldkv, s.R, dv, 0, h.dK, ldgkv);
    for (int64_t j = 0; j < len; ++j)
      for (int64_t c = 0; c < dk; ++c) h.dK[j * ldgkv + c] += s.r[c];
    gemm(false, false, len, dv, dk, 1, s.Kf, dk, s.R, dv, 0, h.dV, ldgkv);
  } else {
    // pass 1, in order: dnum, dden and dQf, with the prefix sums KV, z
    for (int64_t c0 = 0; c0 < T; c0 += C) {
      const int64_t n = std::min(C, T - c0);
      const real *Qf = s.Qf + c0 * dk, *Kf = s.Kf + c0 * dk, *V = h.V + c0 * ldkv;
      real *dnum = s.dnum + c0 * dv, *dden = s.dden + c0, *dQ = h.dQ + c0 * ldgq;
      chunk_scores(Qf, Kf, n, dk, s.A);
      for (int64_t i = 0; i < n; ++i) {
        real den = 0;
        for (int64_t c = 0; c < dk; ++c) den += Qf[i * dk + c] * s.z[c];
        for (int64_t j = 0; j <= i; ++j) den += s.A[i * C + j];
        s.den[c0 + i] = den;
      }
      Head hc = h;
      hc.dO = h.dO + c0 * D;
      hc.O = h.O + c0 * D;
      output_grads(hc, D, s.den + c0, n, dv, dnum, dden);
      // dA = tril(dnum_c V_c^T + dden 1^T)
      chunk_score_grads(dnum, dden, V, ldkv, n, dv, s.dA);
      // dQf_c = dnum_c KV^T + dden_c z^T + dA Kf_c   (n, d_v) x (d_v, d_k) + (n, n) x (n, d_k)
      gemm(false, true, n, dk, dv, 1, dnum, dv, s.KV, dv, 0, dQ, ldgq);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < dk; ++c) dQ[i * ldgq + c] += dden[i] * s.z[c];
      gemm(false, false, n, dk, n, 1, s.dA, C, Kf, dk, 1, dQ, ldgq);
      gemm(true, false, dk, dv, n, 1, Kf, dk, V, ldkv, 1, s.KV, dv);
      add_colsum(s.z, Kf, n, dk);
    }
    // pass 2, in reverse: dKf, dV with the suffix sums R = sum Qf_i dnum_i^T, r = sum dden_i Qf_i
    for (int64_t c0 = (T - 1) / C * C; c0 >= 0; c0 -= C) {
      const int64_t n = std::min(C, T - c0);
      const real *Qf = s.Qf + c0 * dk, *Kf = s.Kf + c0 * dk, *V = h.V + c0 * ldkv;
      const real *dnum = s.dnum + c0 * dv, *dden = s.dden + c0;
      real *dK = h.dK + c0 * ldgkv, *dV = h.dV + c0 * ldgkv;
      chunk_scores(Qf, Kf, n, dk, s.A);
      chunk_score_grads(dnum, dden, V, ldkv, n, dv, s.dA);
      // dKf_c = V_c R^T + 1 r^T + dA^T Qf_c   (n, d_v) x (d_v, d_k) + (n, n) x (n, d_k)
      gemm(false, true, n, dk, dv, 1, V, ldkv, s.R, dv, 0, dK, ldgkv);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t c = 0; c < dk; ++c) dK[j * ldgkv + c] += s.r[c];
      gemm(true, false, n, dk, n, 1, s.dA, C, Qf, dk, 1, dK, ldgkv);
      // dV_c = Kf_c R + A^T dnum_c   (n, d_k) x (d_k, d_v) + (n, n) x (n, d_v)
      gemm(false, false, n, dv, dk, 1, Kf, dk, s.R, dv, 0, dV, ldgkv);
      gemm(true, false, n, dv, n, 1, s.A, C, dnum, dv, 1, dV, ldgkv);
      // R += Qf_c^T dnum_c,  r += Qf_c^T dden_c
      gemm(true, false, dk, dv, n, 1, Qf, dk, dnum, dv, 1, s.R, dv);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < dk; ++c) s.r[c] += dden[i] * Qf[i * dk + c];
    }
  }
  // forward: Kf = phi(K) for visible keys, 0 for hidden ones;  Qf = phi(Q)
  for (int64_t j = len; j < S; ++j) {
    std::fill_n(h.dK + j * ldgkv, dk, real(0));
    std::fill_n(h.dV + j * ldgkv, dv, real(0));
  }
  feature_map_backward(h.dK, ldgkv, h.K, ldkv, len, dk);
  feature_map_backward(h.dQ, ldgq, h.Q, ldq, T, dk);
}

Head head_of(const QKVColumns& in, const AttentionMask& mask, const AttentionSizes& d, int64_t bh,
             real* O, const real* dO, const QKVGradColumns* g) {
  const int64_t b = bh / d.H, h = bh % d.H, dk = d.d_k, dv = d.d_v;
  Head r{};
  r.Q = in.Q + b * d.T * in.ldq + h * dk;
  r.K = in.K + b * d.S * in.ldkv + h * dk;
  r.V = in.V + b * d.S * in.ldkv + h * dv;
  r.O = O + b * d.T * d.D + h * dv;
  r.dO = dO ? dO + b * d.T * d.D + h * dv : nullptr;
  if (g) {
    r.dQ = g->dQ + b * d.T * g->ldq + h * dk;
    r.dK = g->dK + b * d.S * g->ldkv + h * dk;
    r.dV = g->dV + b * d.S * g->ldkv + h * dv;
  }
  r.len = mask.key_lengths.empty() ? d.S : mask.key_lengths[b];
  return r;
}

}  // namespace

void linear_attention_forward(real* O, const QKVColumns& in, const AttentionMask& mask,
                              const AttentionSizes& d) {
  ThreadScratch scratch(Buffers::size(d.T, d.S, d.d_k, d.d_v));
  parallel_for(
      d.B * d.H,
      [&](int64_t bh0, int64_t bh1) {
        Buffers s(scratch.mine(), d.T, d.S, d.d_k, d.d_v);
        for (int64_t bh = bh0; bh < bh1; ++bh)
          head_forward(head_of(in, mask, d, bh, O, nullptr, nullptr), d, in.ldq, in.ldkv,
                       mask.causal, s);
      },
      /*grain=*/1);
}

void linear_attention_backward(const QKVGradColumns& grad, const real* dO, const real* O,
                               const QKVColumns& in, const AttentionMask& mask,
                               const AttentionSizes& d) {
  ThreadScratch scratch(Buffers::size(d.T, d.S, d.d_k, d.d_v));
  parallel_for(
      d.B * d.H,
      [&](int64_t bh0, int64_t bh1) {
        Buffers s(scratch.mine(), d.T, d.S, d.d_k, d.d_v);
        for (int64_t bh = bh0; bh < bh1; ++bh)
          head_backward(head_of(in, mask, d, bh, const_cast<real*>(O), dO, &grad), d, in.ldq,
                        in.ldkv, grad.ldq, grad.ldkv, mask.causal, s);
      },
      /*grain=*/1);
}

}  // namespace qkv::nn::detail
