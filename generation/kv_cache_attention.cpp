// The KV cache's attention steps for the softmax kernels: the projections of
// the new positions, softmax attention over every cached key (the standard,
// memory-efficient and auto kernels, and cross-attention), and sparse
// attention over the cached keys SparsePattern::visible lets each new query
// see. The linear kernel's step is in generation/kv_cache_linear.cpp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/blas.h"
#include "core/parallel.h"
#include "core/reduce.h"
#include "generation/kv_cache_attention.h"
#include "nn/relative_bias.h"
#include "nn/rope.h"
#include "nn/stacked.h"

namespace qkv::nn::kv_cache_detail {

namespace {

// The module's scale (0: the paper's 1/sqrt(d_k)).
real scores_scale(real a_scale, int64_t dk) {
  return a_scale > 0 ? a_scale : real(1) / std::sqrt(static_cast<real>(dk));
}

// Attention of n new queries per row over that row's keys, all heads:
//   O[r, i, head h] = softmax(scale q_h K_g^T + mask) V_g,  g = h / (H / Hkv)
// q (R*n, ldq), head h in columns [h*d_k, (h+1)*d_k). Row r's keys and values
// are L rows of stride Ek + Dv (Ek = Hkv*d_k, Dv = Hkv*d_v: E = H*d_k and
// D = H*d_v unless grouped-query attention shares Hkv < H key/value heads)
// at kv + kv_row(r) * kv_stride: K in columns [0, Ek), V in [Ek, Ek + Dv).
// Query i of row r sees keys j < visible(r, i). O (R*n, D), head h in
// columns [h*d_v, (h+1)*d_v). bias: T5's relative bias by diagonal (H,
// n+L-1) (nn/relative_bias.h), added to the scaled scores, or null.
template <class KvRow, class Visible>
void attend(const real* q, int64_t ldq, const real* kv, int64_t kv_stride, KvRow kv_row,
            Visible visible, int64_t R, int64_t n, int64_t L, int64_t H, int64_t Hkv, int64_t dk,
            int64_t dv, real a_scale, real* O, const real* bias = nullptr) {
  const int64_t Ek = Hkv * dk, D = H * dv, ldkv = Ek + Hkv * dv, G = H / Hkv;
  const real scale = scores_scale(a_scale, dk);
  const real neg_inf = -std::numeric_limits<real>::infinity();
  Tensor P = Tensor::empty({R * H, n, L});  // scores, then probabilities
  parallel_for(
      R * H,
      [&](int64_t p0, int64_t p1) {
        for (int64_t rh = p0; rh < p1; ++rh) {
          const int64_t r = rh / H, h = rh % H, g = h / G;            // g: h's key/value head
          real* Pr = P.data() + rh * n * L;                           // (n, L)
          const real* Kr = kv + kv_row(r) * kv_stride + g * dk;       // (L, d_k), ld Ek+Dv
          const real* Vr = kv + kv_row(r) * kv_stride + Ek + g * dv;  // (L, d_v), ld Ek+Dv
          const real* Qr = q + r * n * ldq + h * dk;                  // (n, d_k), ld ldq
          // scores = scale Q_h K_h^T   (n, d_k) x (d_k, L) -> (n, L)
          gemm(false, true, n, L, dk, scale, Qr, ldq, Kr, ldkv, 0, Pr, L);
          // scores += B_h: row i adds diagonals n-1-i .. (relative bias)
          if (bias) add_diagonal_bias(Pr, L, n, L, bias + h * (n + L - 1) + (n - 1));
          for (int64_t i = 0; i < n; ++i) {
            const int64_t vis = std::max<int64_t>(0, std::min(L, visible(r, i)));
            for (int64_t j = vis; j < L; ++j) Pr[i * L + j] = neg_inf;
          }
          softmax_rows(Pr, n, L);  // a row with no visible key becomes zeros
          // O_h = P V_h   (n, L) x (L, d_v) -> (n, d_v), into its head's columns
          gemm(false, false, n, dv, L, 1, Pr, L, Vr, ldkv, 0, O + r * n * D + h * dv, D);
        }
      },
      std::max<int64_t>(2, grain_for(n * L * (dk + dv))));
}

// Sparse attention of the n new queries per row, positions [t0, t0 + n), over
// the row's cached keys [0, t0 + n). Query t sees key j <= t when
// SparsePattern::visible(t, j) (nn/attention.h), as the full kernel
// (nn/attention_sparse.cpp) with the causal mask lets it:
//   the window   [lo, t], lo = max(0, t - w + 1); for a global query (g > 0,
//                t % g == 0) lo = 0: it sees every earlier key;
//   the globals  0, g, 2g, ... below lo, ceil(lo / g) keys read in place as
//                rows g (E + D) numbers apart (the full kernel's strided run).
// Only those keys are scored: O(w + t/g) per query, not O(t).
// kv (R, cap, E + D) as self_kv; q (R*n, ldq); O (R*n, D).
void attend_sparse(const real* q, int64_t ldq, const real* kv, int64_t cap, const SparsePattern& p,
                   int64_t R, int64_t n, int64_t t0, int64_t H, int64_t dk, int64_t dv,
                   real a_scale, real* O) {
  const int64_t E = H * dk, D = H * dv, ldkv = E + D, L = t0 + n;
  const int64_t w = p.window, g = p.global_every;
  const real scale = scores_scale(a_scale, dk);
  Tensor P = Tensor::empty({R * H, L});  // one query's scores, then probabilities, per (r, h)
  parallel_for(
      R * H,
      [&](int64_t p0, int64_t p1) {
        for (int64_t rh = p0; rh < p1; ++rh) {
          const int64_t r = rh / H, h = rh % H;
          const real* Kr = kv + r * cap * ldkv + h * dk;      // (L, d_k), ld E+D
          const real* Vr = kv + r * cap * ldkv + E + h * dv;  // (L, d_v), ld E+D
          real* s = P.data() + rh * L;
          for (int64_t i = 0; i < n; ++i) {
            const int64_t t = t0 + i;
            const bool global_query = g > 0 && t % g == 0;
            const int64_t lo = global_query ? 0 : std::max<int64_t>(0, t - w + 1);
            const int64_t ng = g > 0 ? (lo + g - 1) / g : 0;  // global keys 0, g, ... < lo
            const int64_t nw = t - lo + 1;                    // window keys [lo, t]
            const real* qi = q + (r * n + i) * ldq + h * dk;  // (1, d_k)
            real* oi = O + (r * n + i) * D + h * dv;          // (1, d_v)
            // scores [globals | window]: (1, d_k) x (d_k, ng) and (1, d_k) x (d_k, nw)
            if (ng > 0) gemm(false, true, 1, ng, dk, scale, qi, ldq, Kr, g * ldkv, 0, s, ng);
            gemm(false, true, 1, nw, dk, scale, qi, ldq, Kr + lo * ldkv, ldkv, 0, s + ng, nw);
            softmax_rows(s, 1, ng + nw);
            // O_h = p_window V_window + p_globals V_globals  (1, nw) x (nw, d_v) + (1, ng) x (ng,
            // d_v)
            gemm(false, false, 1, dv, nw, 1, s + ng, nw, Vr + lo * ldkv, ldkv, 0, oi, D);
            if (ng > 0) gemm(false, false, 1, dv, ng, 1, s, ng, Vr, g * ldkv, 1, oi, D);
          }
        }
      },
      std::max<int64_t>(2, grain_for(n * std::min(L, w + (g > 0 ? L / g + 1 : 0)) * (dk + dv))));
}

// Y = O Wo^T + bo   (R*n, D) x (D, D) -> (R, n, D)
Tensor output_projection(MultiHeadAttention& a, const Tensor& O, int64_t R, int64_t n) {
  const bool bias = a.w_o->bias.defined();
  Tensor Y = Tensor::empty({R, n, a.d_model});
  linear_forward(O, a.w_o->weight.data().data(), bias ? a.w_o->bias.data().data() : nullptr,
                 a.d_model, Y.data());
  return Y;
}

}  // namespace

Tensor self_attention_step(MultiHeadAttention& a, const Tensor& x, KVCache& c, size_t l,
                           int64_t t0) {
  const int64_t R = x.size(0), n = x.size(1), D = a.d_model, E = a.heads * a.d_k;
  const int64_t KV = a.kv_heads * (a.d_k + a.d_v);  // the width of [K | V]: Ek + Dv
  const int64_t W3 = E + KV;                        // the width of [Q | K | V]
  Tensor wscratch, bscratch;
  const bool bias = a.w_q->bias.defined();
  const real* W =
      stacked({&a.w_q->weight.data(), &a.w_k->weight.data(), &a.w_v->weight.data()}, wscratch);
  const real* b =
      bias ? stacked({&a.w_q->bias.data(), &a.w_k->bias.data(), &a.w_v->bias.data()}, bscratch)
           : nullptr;
  Tensor QKV = Tensor::empty({R * n, W3});
  linear_forward(x, W, b, W3, QKV.data());  // (R*n, D) x (D, E+Ek+Dv) -> (R*n, E+Ek+Dv)
  Tensor O = Tensor::empty({R * n, D});     // the heads' outputs
  if (a.kernel == AttentionKernel::Linear) {
    // no keys kept: the running sums take the new positions
    linear_attention_step(QKV.data(), W3, c.linear_kv[l], c.linear_z[l], R, n, a.heads, a.d_k,
                          a.d_v, O.data());
    return output_projection(a, O, R, n);
  }
  // Rotary positions: the new queries and keys turned by the angles of their
  // absolute positions [t0, t0 + n), so the cache holds every key rotated
  // once, as the full forward rotates it (row r*n + i is position t0 + i).
  if (a.rope_base != 0) {
    const RopeTable tab = rope_table(n, a.d_k, a.rope_base, t0);
    rope_rotate(QKV.data(), R * n, a.heads, a.d_k, W3, tab, false);         // Q (R*n, E)
    rope_rotate(QKV.data() + E, R * n, a.kv_heads, a.d_k, W3, tab, false);  // K (R*n, Ek)
  }
  Tensor& kv = c.self_kv[l];  // (R, cap, Ek + Dv)
  const int64_t cap = kv.size(1);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const real* src = QKV.data() + (r * n + i) * W3 + E;  // [K | V] of the new position
      std::copy(src, src + KV, kv.data() + (r * cap + t0 + i) * KV);
    }
  if (a.kernel == AttentionKernel::Sparse) {
    attend_sparse(QKV.data(), W3, kv.data(), cap, a.sparse, R, n, t0, a.heads, a.d_k, a.d_v,
                  a.scale, O.data());
  } else {
    // T5's relative bias: new queries at positions [t0, t0 + n), keys at [0, t0 + n),
    // the same table entries the full forward adds
    Tensor bias;
    if (a.rel_bias.defined()) {
      const RelativeLayout l{
          n, t0 + n, t0, a.rel_bidirectional, a.rel_bias.size(1), a.rel_max_distance};
      bias = Tensor::empty({a.heads, l.diagonals()});  // (H, n + L - 1)
      relative_bias_diagonals(a.rel_bias.data().data(), a.heads, l, bias.data());
    }
    attend(
        QKV.data(), W3, kv.data(), cap * KV, [](int64_t r) { return r; },
        [t0](int64_t, int64_t i) { return t0 + i + 1; },  // causal: query t0+i sees keys [0, t0+i]
        R, n, t0 + n, a.heads, a.kv_heads, a.d_k, a.d_v, a.scale, O.data(),
        bias.defined() ? bias.data() : nullptr);
  }
  return output_projection(a, O, R, n);
}

Tensor cross_attention_step(MultiHeadAttention& a, const Tensor& x, const Tensor& mem_kv,
                            const KVCache& c) {
  const int64_t R = x.size(0), n = x.size(1), D = a.d_model, E = a.heads * a.d_k;
  const int64_t S = mem_kv.size(1), KV = mem_kv.size(2);  // (B_src, S, Ek + Dv)
  const bool bias = a.w_q->bias.defined();
  Tensor Q = Tensor::empty({R * n, E});  // (R*n, D) x (D, E) -> (R*n, E)
  linear_forward(x, a.w_q->weight.data().data(), bias ? a.w_q->bias.data().data() : nullptr, E,
                 Q.data());
  Tensor O = Tensor::empty({R * n, D});
  const int64_t* mrow = c.memory_row.data();
  const int64_t* mlen = c.memory_lengths.data();
  attend(
      Q.data(), E, mem_kv.data(), S * KV, [mrow](int64_t r) { return mrow[r]; },
      [mrow, mlen](int64_t r, int64_t) { return mlen[mrow[r]]; },  // source padding
      R, n, S, a.heads, a.kv_heads, a.d_k, a.d_v, a.scale, O.data());
  return output_projection(a, O, R, n);
}

}  // namespace qkv::nn::kv_cache_detail
