// Grouped-query attention, worked (examples/worked_example.cpp,
// docs/gqa-backward.md): H = 4 query heads share K = 2 key/value heads (a
// group of G = 2 each) over T = S = 3 positions, d_k = d_v = 2, D = 8.
// L = sum(out * dO) for a fixed dO. The gradient of a shared key (value)
// head is the sum of what each query head of its group sends back; the
// engine (the fused multi_head_attention) shows both: with kv_heads = 2 it
// gives the sum, with kv_heads = 4 and every query head its own copy of its
// group's K and V, each head's contribution. By hand: plain loops in double,
// one query head at a time; finite differences of the by-hand forward.
//
// To read dK and dV off the engine, the keys and values sit in the weights:
// the key/value input is one-hot (xkv row s = e_s), so K = xkv Wk^T is
// Wk^T's first S rows and dK = (dWk's first S columns)^T, as in the moe page.
#pragma once
#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "examples/by_hand.h"
#include "nn/attention.h"

namespace qkv::step {

inline constexpr int64_t kGqaT = 3, kGqaHeads = 4, kGqaKvHeads = 2, kGqaDk = 2;
inline constexpr int64_t kGqaD = kGqaHeads * kGqaDk;  // 8: d_v = D / H = 2 = d_k

struct GqaExample {
  Mat Q;   // (T, H*d_k) = (3,8): query head h is columns [2h, 2h + 2)
  Mat KV;  // (S, K*d_k + K*d_v) = (3,8): [K (3,4) | V (3,4)]; kv head g's K is columns [2g, 2g + 2)
  Mat dO;  // (T, D) = (3,8): dL/dout, out = concat_h O_h (Wo = I)
};

inline GqaExample gqa_example() {
  GqaExample ex{Mat(kGqaT, kGqaD), Mat(kGqaT, 2 * kGqaKvHeads * kGqaDk), Mat(kGqaT, kGqaD)};
  ex.Q.a = {0.5, -1,  0,    -1,   -0.5, 1,  0,   1,   //
            1,   0.5, 1.5,  0.5,  1,    0,  0.5, -1,  //
            -1,  1,   -1.5, -0.5, 0,    -1, 1,   0.5};
  ex.KV.a = {1,  0,   -0.5, 1,   /**/ 1, -1,  0.5, 2,  //
             0,  1,   1,    0.5, /**/ 0, 2,   -1,  1,  //
             -1, 0.5, 0,    -1,  /**/ 2, 0.5, 1,   -0.5};
  ex.dO.a = {1, 0,  0, 1,  1,   -1, 0,  1,  //
             0, -1, 1, 0,  0,   1,  -1, 0,  //
             1, 1,  0, -1, 0.5, 0,  1,  1};
  return ex;
}

// Key (value) head g of KV: (S, 2).
inline Mat gqa_key(const Mat& KV, int64_t g) { return hand::columns(KV, g * kGqaDk, kGqaDk); }
inline Mat gqa_value(const Mat& KV, int64_t g) {
  return hand::columns(KV, kGqaKvHeads * kGqaDk + g * kGqaDk, kGqaDk);
}

// ---- the engine ---------------------------------------------------------------

struct GqaPass {
  Mat dK, dV;                 // (3,4) each, kv_heads = 2: the sums
  std::vector<Mat> dKh, dVh;  // per query head (3,2), kv_heads = 4 on copies
};

// One engine pass with kv heads Ks[k], Vs[k] (each (S,2)); returns dK, dV (S, 2k).
inline void gqa_engine(const GqaExample& ex, const std::vector<Mat>& Ks, const std::vector<Mat>& Vs,
                       Mat& dK, Mat& dV) {
  const int64_t T = kGqaT, D = kGqaD, kv = static_cast<int64_t>(Ks.size());
  Tensor xq = Tensor::zeros({1, T, D}), xkv = Tensor::zeros({1, T, D}), dO = xq.clone();
  for (int64_t i = 0; i < T * D; ++i) xq.data()[i] = static_cast<real>(ex.Q.a[i]);
  for (int64_t i = 0; i < T * D; ++i) dO.data()[i] = static_cast<real>(ex.dO.a[i]);
  for (int64_t s = 0; s < T; ++s) xkv.data()[s * D + s] = 1;  // one-hot: row s = e_s
  Tensor eye = Tensor::zeros({D, D}), wk = Tensor::zeros({kv * kGqaDk, D});
  Tensor wv = Tensor::zeros({kv * kGqaDk, D});
  for (int64_t i = 0; i < D; ++i) eye.data()[i * D + i] = 1;
  for (int64_t g = 0; g < kv; ++g)  // Wk[g d_k + i, s] = K_g[s, i]: K = xkv Wk^T
    for (int64_t i = 0; i < kGqaDk; ++i)
      for (int64_t s = 0; s < T; ++s) {
        wk.data()[(g * kGqaDk + i) * D + s] = static_cast<real>(Ks[g](s, i));
        wv.data()[(g * kGqaDk + i) * D + s] = static_cast<real>(Vs[g](s, i));
      }
  nn::AttentionWeights w;
  w.wq = Var(eye.clone(), false), w.wo = Var(eye.clone(), false);
  w.wk = Var(wk, true), w.wv = Var(wv, true);
  nn::AttentionOptions o;
  o.heads = kGqaHeads;
  o.kv_heads = kv;
  Var out = nn::multi_head_attention(Var(xq, false), Var(xkv, false), w, o).out;  // (1,T,D)
  sum(out * Var(dO, false)).backward();
  const Mat dWk = to_mat(w.wk.grad()), dWv = to_mat(w.wv.grad());  // (2k, D)
  dK = dV = Mat(T, kv * kGqaDk);
  for (int64_t s = 0; s < T; ++s)
    for (int64_t c = 0; c < kv * kGqaDk; ++c) dK(s, c) = dWk(c, s), dV(s, c) = dWv(c, s);
}

inline GqaPass gqa_pass(const GqaExample& ex) {
  GqaPass p;
  std::vector<Mat> Ks, Vs, Kc, Vc;
  for (int64_t g = 0; g < kGqaKvHeads; ++g) Ks.push_back(gqa_key(ex.KV, g));
  for (int64_t g = 0; g < kGqaKvHeads; ++g) Vs.push_back(gqa_value(ex.KV, g));
  gqa_engine(ex, Ks, Vs, p.dK, p.dV);
  const int64_t G = kGqaHeads / kGqaKvHeads;
  for (int64_t h = 0; h < kGqaHeads; ++h) Kc.push_back(Ks[h / G]), Vc.push_back(Vs[h / G]);
  Mat dKc, dVc;  // (3,8): query head h's copy is columns [2h, 2h + 2)
  gqa_engine(ex, Kc, Vc, dKc, dVc);
  for (int64_t h = 0; h < kGqaHeads; ++h) {
    p.dKh.push_back(hand::columns(dKc, h * kGqaDk, kGqaDk));
    p.dVh.push_back(hand::columns(dVc, h * kGqaDk, kGqaDk));
  }
  return p;
}

// ---- by hand ------------------------------------------------------------------

// Query head h with its own K_h', V_h' (each (S,2)):
//   Z_h = Q_h K_h'^T / sqrt(d_k),  P_h = softmax(Z_h),  O_h = P_h V_h'
// L = sum over h of sum(O_h * dO_h). Backward, head by head:
//   dP_h = dO_h V_h'^T,  dZ_h = P_h * (dP_h - rowsum(dP_h * P_h)),
//   dK_h' = dZ_h^T Q_h / sqrt(d_k),  dV_h' = P_h^T dO_h
// Shared heads are copies, K_h' = K_{h/G}, so dK_g = sum over h in g of dK_h'.
struct GqaByHand {
  std::vector<Mat> P, dKh, dVh;  // per query head: (3,3), (3,2), (3,2)
  Mat dK, dV;                    // (3,4) each: the group sums
  double L = 0;
};

inline GqaByHand gqa_heads_by_hand(const GqaExample& ex, const std::vector<Mat>& Kh,
                                   const std::vector<Mat>& Vh) {
  const double scale = 1 / std::sqrt(static_cast<double>(kGqaDk));
  GqaByHand r;
  for (int64_t h = 0; h < kGqaHeads; ++h) {
    const Mat Q = hand::columns(ex.Q, h * kGqaDk, kGqaDk);
    const Mat dO = hand::columns(ex.dO, h * kGqaDk, kGqaDk);
    const Mat P = hand::softmax(hand::scaled(hand::matmul(Q, hand::transpose(Kh[h])), scale));
    const Mat O = hand::matmul(P, Vh[h]);
    for (size_t i = 0; i < O.a.size(); ++i) r.L += O.a[i] * dO.a[i];
    const Mat dZ = hand::softmax_backward(P, hand::matmul(dO, hand::transpose(Vh[h])));
    r.P.push_back(P);
    r.dKh.push_back(hand::scaled(hand::matmul(hand::transpose(dZ), Q), scale));
    r.dVh.push_back(hand::matmul(hand::transpose(P), dO));
  }
  const int64_t G = kGqaHeads / kGqaKvHeads;
  r.dK = r.dV = Mat(kGqaT, kGqaKvHeads * kGqaDk);
  for (int64_t h = 0; h < kGqaHeads; ++h) {
    const int64_t c0 = h / G * kGqaDk;  // kv head h / G's columns
    hand::set_columns(r.dK, c0, hand::plus(hand::columns(r.dK, c0, kGqaDk), r.dKh[h]));
    hand::set_columns(r.dV, c0, hand::plus(hand::columns(r.dV, c0, kGqaDk), r.dVh[h]));
  }
  return r;
}

// The grouped forward: query head h reads key/value head h / G.
inline GqaByHand gqa_by_hand(const GqaExample& ex) {
  std::vector<Mat> Kh, Vh;
  const int64_t G = kGqaHeads / kGqaKvHeads;
  for (int64_t h = 0; h < kGqaHeads; ++h)
    Kh.push_back(gqa_key(ex.KV, h / G)), Vh.push_back(gqa_value(ex.KV, h / G));
  return gqa_heads_by_hand(ex, Kh, Vh);
}

// Finite differences of the by-hand L: of the shared [K | V] (3,8), and of
// query head h's own copy of its K (V), the others' copies held still.
inline Mat gqa_fd(const GqaExample& ex) {
  return hand::central_difference(
      [&](const Mat& KV) {
        GqaExample e = ex;
        e.KV = KV;
        return gqa_by_hand(e).L;
      },
      ex.KV);
}

inline Mat gqa_fd_copy(const GqaExample& ex, int64_t h, bool value) {
  std::vector<Mat> Kh, Vh;
  const int64_t G = kGqaHeads / kGqaKvHeads;
  for (int64_t j = 0; j < kGqaHeads; ++j)
    Kh.push_back(gqa_key(ex.KV, j / G)), Vh.push_back(gqa_value(ex.KV, j / G));
  return hand::central_difference(
      [&](const Mat& m) {
        std::vector<Mat> k = Kh, v = Vh;
        (value ? v : k)[h] = m;
        return gqa_heads_by_hand(ex, k, v).L;
      },
      value ? Vh[h] : Kh[h]);
}

}  // namespace qkv::step
