// The memory-efficient heads' kernel of the fused attention op: the numbers
// of the standard kernel (nn/attention.cpp) without ever holding the
// (T, S) probabilities, by an online softmax over blocks of keys (Milakov &
// Gimelshein 2018; FlashAttention, Dao et al. 2022). Also the engine the
// sparse kernel (nn/attention_sparse.cpp) runs on its visible blocks.
//
// Forward, one block of Br query rows against key blocks of Bc keys, keeping
// per row the running max m, the running sum l and the unnormalised output acc:
//   Z     = scale Q_blk K_j^T + M               (Br, Bc)
//   m'    = max(m, rowmax(Z))
//   P~    = exp(Z - m')                         (Br, Bc), unnormalised
//   l     = exp(m - m') l + rowsum(P~)          the old sum rescaled to the new max
//   acc   = exp(m - m') acc + P~ V_j            (Br, d_v)
//   m     = m'
// and after the last block O = acc / l and lse = m + log(l), the row's
// log-sum-exp, which is all forward keeps (B*H*T numbers, not B*H*T*S).
// A row with no visible key has l = 0: O = 0 and lse = +inf, so that
// exp(Z - lse) is 0 in backward, as the standard kernel's zero row of P.
//
// Backward remakes P block by block, P = exp(Z - lse), and uses
//   rowsum(dP * P)_i = sum_j (dO_i . V_j) P_ij = dO_i . O_i     (= rowdot_i)
// so that the softmax backward dZ = P * (dP - rowdot) needs no full row of P:
//   dV_j += P^T dO_blk     (Bc, Br) x (Br, d_v)
//   dP    = dO_blk V_j^T   (Br, d_v) x (d_v, Bc)
//   dZ    = P * (dP - rowdot)  (Br, Bc)
//   dQ_blk += scale dZ K_j (Br, Bc) x (Bc, d_k)
//   dK_j += scale dZ^T Q_blk  (Bc, Br) x (Br, d_k)
// (Q, K and dQ, dK have d_k columns per head; V, O, dO, dV have d_v.)
// T5's relative bias (nn/relative_bias.h) adds B[i, j] = bias[j - i + T - 1]
// to Z before the mask, in forward and when backward remakes P, and backward
// sums dZ along the diagonals into dbias[j - i + T - 1].
// docs/long-sequences.md derives both.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/blas.h"
#include "core/fast_math.h"
#include "core/parallel.h"
#include "core/thread_scratch.h"
#include "nn/attention_internal.h"
#include "nn/relative_bias.h"

namespace qkv::nn::detail {

namespace {

constexpr int64_t Br = kQueryBlock, Bc = kKeyBlock;
constexpr real kNegInf = -std::numeric_limits<real>::infinity();

int64_t ceil_div(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

// For each query row r of q, the run indices [lo[r], hi[r]) of the keys of
// `k` it may see (before skip_every and the mask tensor); empty for a hidden
// row. Returns false when no row sees any key of the run.
bool row_ranges(const QueryRun& q, const KeyRun& k, const RowLimits& lim, int64_t* lo,
                int64_t* hi) {
  bool any = false;
  for (int64_t r = 0; r < q.n; ++r) {
    const int64_t i = q.first + r * q.step;  // the query's position
    lo[r] = hi[r] = 0;
    if (q.hide_every > 0 && i % q.hide_every == 0) continue;
    int64_t plo = k.window ? std::max<int64_t>(0, i - k.window + 1) : 0;
    int64_t phi = std::min(lim.visible_keys, lim.causal ? std::min(i + 1, lim.S) : lim.S);
    if (k.window) phi = std::min(phi, i + k.window);
    // positions [plo, phi) -> run rows with first + j*step in that range
    lo[r] = std::min(k.n, ceil_div(plo - k.first, k.step));
    hi[r] = std::min(k.n, ceil_div(phi - k.first, k.step));
    if (hi[r] < lo[r]) hi[r] = lo[r];
    any |= hi[r] > lo[r];
  }
  return any;
}

// Z (rows, nb), row stride Bc, the scores of keys [j0, j0 + nb) of run k:
// every score the row may not see becomes -inf.
void hide_block(real* Z, const QueryRun& q, const KeyRun& k, const RowLimits& lim,
                const int64_t* lo, const int64_t* hi, int64_t j0, int64_t nb) {
  for (int64_t r = 0; r < q.n; ++r) {
    real* z = Z + r * Bc;  // (nb)
    const int64_t a = std::clamp<int64_t>(lo[r] - j0, 0, nb);
    const int64_t b = std::clamp<int64_t>(hi[r] - j0, a, nb);
    for (int64_t c = 0; c < a; ++c) z[c] = kNegInf;
    for (int64_t c = b; c < nb; ++c) z[c] = kNegInf;
    if (a == b) continue;
    if (k.skip_every > 0) {
      // positions p = first + (j0 + c) step with p % skip_every == 0 (step is 1 here)
      const int64_t p0 = k.first + (j0 + a) * k.step;
      for (int64_t p = ceil_div(p0, k.skip_every) * k.skip_every; p < k.first + (j0 + b) * k.step;
           p += k.skip_every)
        z[(p - k.first) / k.step - j0] = kNegInf;
    }
    if (lim.mask) {
      const real* m = lim.mask + (q.first + r * q.step) * lim.S;  // the query's mask row (S)
      for (int64_t c = a; c < b; ++c)
        if (m[k.first + (j0 + c) * k.step] != 0) z[c] = kNegInf;
    }
  }
}

// The diagonal j - i + T - 1 of a block's element (0, 0): query position
// q.first, key position k.first + j0 (runs of step 1).
int64_t diagonal0(const QueryRun& q, const KeyRun& k, const RowLimits& lim, int64_t j0) {
  return (k.first + j0) - q.first + lim.T - 1;
}

// acc holds O's rows (Br, d_v) in forward, dQ's rows (Br, d_k) in backward.
struct Scratch {
  real *Z, *dP, *acc, *m, *l, *rowdot;
  explicit Scratch(real* s, int64_t acc_width)
      : Z(s),
        dP(s + Br * Bc),
        acc(s + 2 * Br * Bc),
        m(acc + Br * acc_width),
        l(m + Br),
        rowdot(l + Br) {}
};

}  // namespace

int64_t blockwise_scratch_size(int64_t d_k, int64_t d_v) {
  return 2 * Br * Bc + Br * std::max(d_k, d_v) + 3 * Br;
}

// ---- Forward ----------------------------------------------------------------------------

void query_block_forward(const QueryRun& q, const KeyRun* keys, int64_t n_keys,
                         const RowLimits& lim, int64_t d_k, int64_t d_v, real scale,
                         real* scratch) {
  Scratch s(scratch, std::max(d_k, d_v));
  const int64_t n = q.n;
  std::fill(s.acc, s.acc + n * d_v, real(0));
  std::fill(s.m, s.m + n, kNegInf);
  std::fill(s.l, s.l + n, real(0));
  int64_t lo[Br], hi[Br];
  for (int64_t kr = 0; kr < n_keys; ++kr) {
    const KeyRun& k = keys[kr];
    if (!row_ranges(q, k, lim, lo, hi)) continue;
    int64_t first = k.n, last = 0;  // the run rows some query row sees
    for (int64_t r = 0; r < n; ++r)
      if (hi[r] > lo[r]) first = std::min(first, lo[r]), last = std::max(last, hi[r]);
    for (int64_t j0 = first; j0 < last; j0 += Bc) {
      const int64_t nb = std::min(Bc, last - j0);
      // Z = scale Q_blk K_j^T          (n, d_k) x (d_k, nb) -> (n, nb), row stride Bc
      gemm(false, true, n, nb, d_k, scale, q.Q, q.ldq, k.K + j0 * k.ld, k.ld, 0, s.Z, Bc);
      // Z += B (relative bias): element (0, 0) is diagonal (k.first + j0) - q.first + T - 1
      if (lim.bias) add_diagonal_bias(s.Z, Bc, n, nb, lim.bias + diagonal0(q, k, lim, j0));
      // Z += M
      hide_block(s.Z, q, k, lim, lo, hi, j0, nb);
      // the online softmax: P~ = exp(Z - m'), l and acc rescaled by exp(m - m')
      for (int64_t r = 0; r < n; ++r) {
        real* z = s.Z + r * Bc;  // (nb): Z's row in, P~'s row out
        real mx = kNegInf;
        for (int64_t c = 0; c < nb; ++c) mx = std::max(mx, z[c]);
        if (mx == kNegInf) {  // nothing visible in this block: P~ row 0, state unchanged
          std::fill(z, z + nb, real(0));
          continue;
        }
        const real m_new = std::max(s.m[r], mx);
        const real alpha = fast_exp(s.m[r] - m_new);  // 0 when m was -inf
        real sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < nb; ++c) {
          z[c] = fast_exp(z[c] - m_new);
          sum += z[c];
        }
        s.l[r] = alpha * s.l[r] + sum;
        real* a = s.acc + r * d_v;
        for (int64_t c = 0; c < d_v; ++c) a[c] *= alpha;
        s.m[r] = m_new;
      }
      // acc += P~ V_j                   (n, nb) x (nb, d_v) -> (n, d_v)
      gemm(false, false, n, d_v, nb, 1, s.Z, Bc, k.V + j0 * k.ld, k.ld, 1, s.acc, d_v);
    }
  }
  // O = acc / l,  lse = m + log(l); a hidden row is another pass's, an empty one 0 and +inf
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = q.first + r * q.step;
    if (q.hide_every > 0 && i % q.hide_every == 0) continue;
    real* o = q.O + r * q.ldo;
    const real inv = s.l[r] > 0 ? 1 / s.l[r] : 0;
    for (int64_t c = 0; c < d_v; ++c) o[c] = s.acc[r * d_v + c] * inv;
    q.lse[r * q.step] =
        s.l[r] > 0 ? s.m[r] + std::log(s.l[r]) : std::numeric_limits<real>::infinity();
  }
}

// ---- Backward ---------------------------------------------------------------------------

void query_block_backward(const QueryRun& q, const KeyRun* keys, int64_t n_keys,
                          const RowLimits& lim, int64_t d_k, int64_t d_v, real scale,
                          real* scratch) {
  Scratch s(scratch, std::max(d_k, d_v));
  const int64_t n = q.n;
  // rowdot_i = rowsum(dP * P)_i = dO_i . O_i; dQ_blk accumulates in acc
  for (int64_t r = 0; r < n; ++r) {
    const real* o = q.O + r * q.ldo;
    const real* d = q.dO + r * q.ldo;
    real dot = 0;
    for (int64_t c = 0; c < d_v; ++c) dot += o[c] * d[c];
    s.rowdot[r] = dot;
  }
  std::fill(s.acc, s.acc + n * d_k, real(0));
  int64_t lo[Br], hi[Br];
  for (int64_t kr = 0; kr < n_keys; ++kr) {
    const KeyRun& k = keys[kr];
    if (!row_ranges(q, k, lim, lo, hi)) continue;
    int64_t first = k.n, last = 0;
    for (int64_t r = 0; r < n; ++r)
      if (hi[r] > lo[r]) first = std::min(first, lo[r]), last = std::max(last, hi[r]);
    for (int64_t j0 = first; j0 < last; j0 += Bc) {
      const int64_t nb = std::min(Bc, last - j0);
      // forward: Z = scale Q_blk K_j^T + M, P = exp(Z - lse): P remade
      gemm(false, true, n, nb, d_k, scale, q.Q, q.ldq, k.K + j0 * k.ld, k.ld, 0, s.Z, Bc);
      if (lim.bias) add_diagonal_bias(s.Z, Bc, n, nb, lim.bias + diagonal0(q, k, lim, j0));
      hide_block(s.Z, q, k, lim, lo, hi, j0, nb);
      for (int64_t r = 0; r < n; ++r) {
        real* z = s.Z + r * Bc;
        const real lse = q.lse[r * q.step];
#pragma omp simd
        for (int64_t c = 0; c < nb; ++c) z[c] = fast_exp(z[c] - lse);
      }
      const real* P = s.Z;
      // forward: O += P V_j
      //   dV_j += P^T dO_blk         (nb, n) x (n, d_v) -> (nb, d_v)
      gemm(true, false, nb, d_v, n, 1, P, Bc, q.dO, q.ldo, 1, k.dV + j0 * k.ldg, k.ldg);
      //   dP = dO_blk V_j^T          (n, d_v) x (d_v, nb) -> (n, nb)
      gemm(false, true, n, nb, d_v, 1, q.dO, q.ldo, k.V + j0 * k.ld, k.ld, 0, s.dP, Bc);
      // forward: P = softmax(Z):  dZ = P * (dP - rowdot), in place over dP
      for (int64_t r = 0; r < n; ++r) {
        real* d = s.dP + r * Bc;
        const real* p = P + r * Bc;
        const real rd = s.rowdot[r];
#pragma omp simd
        for (int64_t c = 0; c < nb; ++c) d[c] = p[c] * (d[c] - rd);
      }
      const real* dZ = s.dP;
      // forward: Z += B (relative bias):  dB = dZ, summed per diagonal
      if (lim.dbias) sum_diagonals(dZ, Bc, n, nb, lim.dbias + diagonal0(q, k, lim, j0));
      // forward: Z = scale Q_blk K_j^T
      //   dQ_blk += scale dZ K_j     (n, nb) x (nb, d_k) -> (n, d_k)
      gemm(false, false, n, d_k, nb, scale, dZ, Bc, k.K + j0 * k.ld, k.ld, 1, s.acc, d_k);
      //   dK_j += scale dZ^T Q_blk   (nb, n) x (n, d_k) -> (nb, d_k)
      gemm(true, false, nb, d_k, n, scale, dZ, Bc, q.Q, q.ldq, 1, k.dK + j0 * k.ldg, k.ldg);
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    real* g = q.dQ + r * q.ldg;
    for (int64_t c = 0; c < d_k; ++c) g[c] += s.acc[r * d_k + c];
  }
}

// ---- The memory-efficient kernel: every key of the head, one run -----------------------

namespace {

// The runs of head h of sequence b, for query rows [t0, t0 + n).
struct HeadRuns {
  QueryRun q;
  KeyRun k;
  RowLimits lim;
};

// bias (H, T+S-1) and dbias (B, H, T+S-1): the relative bias by diagonal and
// its gradient's diagonal sums, or null.
HeadRuns head_runs(const QKVColumns& in, const QKVGradColumns* grad, real* O, const real* dO,
                   real* lse, const AttentionMask& mask, const AttentionSizes& d, int64_t b,
                   int64_t h, int64_t t0, int64_t n, const real* bias, real* dbias) {
  const int64_t T = d.T, S = d.S, D = d.D, dk = d.d_k, dv = d.d_v, bh = b * d.H + h;
  const int64_t g = d.kv_head(h);  // the key/value head query head h reads
  HeadRuns r{};
  r.q.Q = in.Q + (b * T + t0) * in.ldq + h * dk;
  r.q.O = O + (b * T + t0) * D + h * dv;
  r.q.dO = dO ? dO + (b * T + t0) * D + h * dv : nullptr;
  r.q.dQ = grad ? grad->dQ + (b * T + t0) * grad->ldq + h * dk : nullptr;
  r.q.lse = lse + bh * T + t0;
  r.q.n = n;
  r.q.ldq = in.ldq;
  r.q.ldo = D;
  r.q.ldg = grad ? grad->ldq : 0;
  r.q.first = t0;
  r.q.step = 1;
  r.k.K = in.K + b * S * in.ldkv + g * dk;
  r.k.V = in.V + b * S * in.ldkv + g * dv;
  r.k.dK = grad ? grad->dK + b * S * grad->ldkv + g * dk : nullptr;
  r.k.dV = grad ? grad->dV + b * S * grad->ldkv + g * dv : nullptr;
  r.k.n = S;
  r.k.ld = in.ldkv;
  r.k.ldg = grad ? grad->ldkv : 0;
  r.k.step = 1;
  r.lim.S = S;
  r.lim.visible_keys = mask.key_lengths.empty() ? S : mask.key_lengths[b];
  r.lim.causal = mask.causal;
  if (mask.mask.defined()) r.lim.mask = mask.mask.data() + (mask.mask.dim() == 3 ? b * T * S : 0);
  r.lim.T = T;
  if (bias) r.lim.bias = bias + h * (T + S - 1);      // (T+S-1) of head h
  if (dbias) r.lim.dbias = dbias + bh * (T + S - 1);  // (T+S-1) of (b, h)
  return r;
}

}  // namespace

void zero_query_grads(const QKVGradColumns& g, const AttentionSizes& d, int64_t b, int64_t h) {
  for (int64_t t = 0; t < d.T; ++t)
    std::fill_n(g.dQ + (b * d.T + t) * g.ldq + h * d.d_k, d.d_k, real(0));
}

void zero_key_grads(const QKVGradColumns& g, const AttentionSizes& d, int64_t b, int64_t kv) {
  for (int64_t j = 0; j < d.S; ++j) {
    std::fill_n(g.dK + (b * d.S + j) * g.ldkv + kv * d.d_k, d.d_k, real(0));
    std::fill_n(g.dV + (b * d.S + j) * g.ldkv + kv * d.d_v, d.d_v, real(0));
  }
}

void zero_head_grads(const QKVGradColumns& g, const AttentionSizes& d, int64_t b, int64_t h) {
  zero_query_grads(g, d, b, h);
  zero_key_grads(g, d, b, h);
}

void blockwise_forward(real* lse, real* O, const QKVColumns& in, const AttentionMask& mask,
                       const AttentionSizes& d, real scale, const real* bias) {
  // every (sequence, head, query block) is independent in forward
  const int64_t blocks = ceil_div(d.T, Br);
  ThreadScratch scratch(blockwise_scratch_size(d.d_k, d.d_v));
  parallel_for(
      d.B * d.H * blocks,
      [&](int64_t u0, int64_t u1) {
        real* s = scratch.mine();
        for (int64_t u = u0; u < u1; ++u) {
          const int64_t bh = u / blocks, t0 = (u % blocks) * Br;
          HeadRuns r = head_runs(in, nullptr, O, nullptr, lse, mask, d, bh / d.H, bh % d.H, t0,
                                 std::min(Br, d.T - t0), bias, nullptr);
          query_block_forward(r.q, &r.k, 1, r.lim, d.d_k, d.d_v, scale, s);
        }
      },
      /*grain=*/1);
}

void blockwise_backward(const QKVGradColumns& grad, const real* dO, const real* O, const real* lse,
                        const QKVColumns& in, const AttentionMask& mask, const AttentionSizes& d,
                        real scale, const real* bias, real* dbias) {
  // dK and dV of a key/value head gather every query block of every query
  // head of its group (G = H / Hkv; 1 without grouped-query attention):
  //   dK_g = sum_{h in g} sum_blocks ...,  dV_g likewise.
  // One (sequence, key/value head) per task, so no two threads add into the same dK_g.
  ThreadScratch scratch(blockwise_scratch_size(d.d_k, d.d_v));
  const int64_t G = d.group();
  parallel_for(
      d.B * d.Hkv,
      [&](int64_t bg0, int64_t bg1) {
        real* s = scratch.mine();
        for (int64_t bg = bg0; bg < bg1; ++bg) {
          const int64_t b = bg / d.Hkv, g = bg % d.Hkv;
          zero_key_grads(grad, d, b, g);
          for (int64_t h = g * G; h < (g + 1) * G; ++h) {
            zero_query_grads(grad, d, b, h);
            // row (b, h) of dbias: this task's alone
            if (dbias) std::fill_n(dbias + (b * d.H + h) * (d.T + d.S - 1), d.T + d.S - 1, real(0));
            for (int64_t t0 = 0; t0 < d.T; t0 += Br) {
              HeadRuns r = head_runs(in, &grad, const_cast<real*>(O), dO, const_cast<real*>(lse),
                                     mask, d, b, h, t0, std::min(Br, d.T - t0), bias, dbias);
              query_block_backward(r.q, &r.k, 1, r.lim, d.d_k, d.d_v, scale, s);
            }
          }
        }
      },
      /*grain=*/1);
}

}  // namespace qkv::nn::detail
