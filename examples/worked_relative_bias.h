// T5's relative position bias, worked (examples/worked_example.cpp,
// docs/relative-bias-backward.md): the bucket of a relative position by the
// library (nn::relative_position_bucket) and by hand, for the 32 buckets and
// maximum distance 128 qkv's models use; then one head of self-attention over
// 12 positions with the bias, and the table's gradient by the engine (the
// fused multi_head_attention) beside the scatter-add of dZ by hand.
#pragma once
#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "examples/by_hand.h"
#include "nn/attention.h"
#include "nn/relative_bias.h"

namespace qkv::step {

// qkv's defaults: 32 buckets (--rel-buckets, as T5), maximum distance 128.
inline constexpr int64_t kRelBuckets = 32, kRelMaxDistance = 128;

// The relative positions (key - query) of the bucket table.
inline std::vector<int64_t> relative_positions() {
  return {-200, -128, -64, -20, -16, -12, -8, -7, -1, 0, 1, 7, 8, 12, 16, 20, 64, 128, 200};
}

// By hand, from the buckets' boundaries rather than the library's formula:
// of a direction's nb buckets, distances 0 .. nb/2 - 1 have one each; bucket
// nb/2 + m (m = 1 .. nb/2 - 1) starts at the distance
//   start_m = (nb/2) (max_distance / (nb/2))^(m / (nb/2)),
// a geometric ladder from nb/2 to max_distance; a distance belongs to the
// last bucket whose start it reaches.
inline double bucket_start(int64_t m, int64_t nb, int64_t max_distance) {
  const double exact = static_cast<double>(nb / 2);
  return exact * std::pow(max_distance / exact, static_cast<double>(m) / (nb - nb / 2));
}

inline int64_t bucket_by_hand(int64_t rel, bool bidirectional, int64_t buckets,
                              int64_t max_distance) {
  const int64_t nb = bidirectional ? buckets / 2 : buckets;  // a direction's buckets
  const int64_t base = bidirectional && rel > 0 ? nb : 0;    // a later key: the upper half
  const int64_t n = bidirectional ? std::abs(rel) : std::max<int64_t>(-rel, 0);
  if (n < nb / 2) return base + n;
  int64_t m = 0;
  while (m + 1 < nb - nb / 2 && n >= bucket_start(m + 1, nb, max_distance)) ++m;
  return base + nb / 2 + m;
}

// One head (d_k = 2) of bidirectional self-attention over T = 12 positions,
// x_t = [cos t, sin t], the projections all the identity, so Q = K = V = x;
// the table starts at zero, and L = sum over t of out[t, 0].
inline constexpr int64_t kRelT = 12;

inline Mat relative_x() {
  Mat x(kRelT, 2);
  for (int64_t t = 0; t < kRelT; ++t) x(t, 0) = std::cos(double(t)), x(t, 1) = std::sin(double(t));
  return x;
}

struct RelativeBiasPass {
  Mat dtable;  // (1,32) the engine's dL/dtable
};

inline RelativeBiasPass relative_bias_pass() {
  const Mat xm = relative_x();
  Tensor x = Tensor::zeros({1, kRelT, 2});
  for (int64_t i = 0; i < 2 * kRelT; ++i) x.data()[i] = static_cast<real>(xm.a[i]);
  Tensor eye = Tensor::zeros({2, 2});
  eye.data()[0] = eye.data()[3] = 1;
  nn::AttentionWeights w;
  w.wq = Var(eye.clone(), false), w.wk = Var(eye.clone(), false);
  w.wv = Var(eye.clone(), false), w.wo = Var(eye.clone(), false);
  nn::AttentionOptions o;
  o.heads = 1;
  o.rel_bias = Var(Tensor::zeros({1, kRelBuckets}), true).set_name("rel_bias");
  o.rel_bidirectional = true;
  o.rel_max_distance = kRelMaxDistance;
  Var X(x, false);
  Var out = nn::multi_head_attention(X, X, w, o).out;  // (1,T,2)
  Tensor dout = Tensor::zeros({1, kRelT, 2});
  for (int64_t t = 0; t < kRelT; ++t) dout.data()[2 * t] = 1;  // L = sum_t out[t, 0]
  sum(out * Var(dout, false)).backward();
  return {to_mat(o.rel_bias.grad())};
}

// By hand: Z = x x^T / sqrt(2) + table[bucket(j - i)], P = softmax(Z),
// out = P x, dout = [1, 0] per row; dP = dout x^T, dZ = P * (dP - rowsum(dP * P)),
// dtable[k] = the sum of dZ over the pairs (i, j) in bucket k.
struct RelativeBiasByHand {
  Mat dZ;      // (T,T)
  Mat dtable;  // (1,32)
  Mat pairs;   // (1,32) how many (i, j) fall in each bucket
  double L = 0;
};

inline RelativeBiasByHand relative_bias_by_hand(const Mat& table) {
  const Mat x = relative_x();
  const int64_t T = x.rows;
  Mat Z = hand::scaled(hand::matmul(x, hand::transpose(x)), 1 / std::sqrt(2.0));
  RelativeBiasByHand h;
  h.pairs = h.dtable = Mat(1, kRelBuckets);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      Z(i, j) += table(0, bucket_by_hand(j - i, true, kRelBuckets, kRelMaxDistance));
  const Mat P = hand::softmax(Z), out = hand::matmul(P, x);
  Mat dout(T, 2);
  for (int64_t t = 0; t < T; ++t) dout(t, 0) = 1, h.L += out(t, 0);
  h.dZ = hand::softmax_backward(P, hand::matmul(dout, hand::transpose(x)));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) {
      const int64_t k = bucket_by_hand(j - i, true, kRelBuckets, kRelMaxDistance);
      h.dtable(0, k) += h.dZ(i, j);
      h.pairs(0, k) += 1;
    }
  return h;
}

}  // namespace qkv::step
