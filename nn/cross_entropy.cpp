#include "nn/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/pool.h"
#include "core/reduce.h"

namespace qkv::nn {

// Saved: the softmax probabilities p (N, V), the targets, and the count of
// rows that are not ignored. Ignored rows of p are computed but never read.
struct CrossEntropyNode : Node {
  Tensor p;
  PoolVector<int64_t> targets;  // pooled: a copy is made every step
  int64_t ignore_index = -100;
  int64_t n_valid = 0;
  real smoothing = 0;
  const char* name() const override { return "cross_entropy"; }

  // d(-logp[c]) / dlogits = softmax - onehot(c), so with q = (1 - eps) onehot(y) + eps / V
  // (the smoothed target, summing to 1): dlogits_i = (p_i - q_i) / n_valid; ignored rows 0.
  TensorList backward(const Tensor& g) override {
    const int64_t V = p.size(-1), N = p.numel() / V;
    Tensor d = Tensor::empty(p.shape());
    real* __restrict dp = d.data();
    const real* __restrict pp = p.data();
    const real scale = n_valid > 0 ? g.item() / static_cast<real>(n_valid) : real(0);
    const real off = smoothing / static_cast<real>(V);  // q off the target
    const real on = real(1) - smoothing;                // q at the target, less off
    parallel_for(
        N,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            real* __restrict dr = dp + r * V;
            const int64_t y = targets[r];
            if (y == ignore_index) {
              std::fill(dr, dr + V, real(0));
              continue;
            }
            const real* __restrict pr = pp + r * V;
#pragma omp simd
            for (int64_t c = 0; c < V; ++c) dr[c] = (pr[c] - off) * scale;
            dr[y] -= on * scale;
          }
        },
        std::max<int64_t>(1, kParallelGrain / V));
    return {d};
  }
  void release_saved() override {
    p = Tensor();
    targets = PoolVector<int64_t>();
  }
};

Var cross_entropy(const Var& logits, const std::vector<int64_t>& targets, int64_t ignore_index,
                  real label_smoothing) {
  const Tensor& X = logits.data();
  if (X.dim() < 2 || X.size(-1) == 0)
    throw Error("cross_entropy: logits " + to_string(X.shape()) +
                " must be (N, V) or (B, T, V) with V > 0");
  const int64_t V = X.size(-1), N = X.numel() / V;
  if (static_cast<int64_t>(targets.size()) != N)
    throw Error("cross_entropy: logits " + to_string(X.shape()) + " have " + std::to_string(N) +
                " rows but " + std::to_string(targets.size()) + " targets were given");
  if (!(label_smoothing >= 0 && label_smoothing <= 1))
    throw Error("cross_entropy: label_smoothing must be in [0, 1], got " +
                std::to_string(label_smoothing));
  int64_t n_valid = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t y = targets[i];
    if (y == ignore_index) continue;
    if (y < 0 || y >= V)
      throw Error("cross_entropy: target " + std::to_string(y) + " at index " + std::to_string(i) +
                  " is out of range [0, V) with V = " + std::to_string(V) +
                  " (and is not ignore_index " + std::to_string(ignore_index) + ")");
    ++n_valid;
  }

  // p = softmax(x) (N, V), kept for backward, with each row's
  // lse = log(sum_c exp(x_c)) and sum_c x_c: the core row softmax computes all
  // three in its passes over the row. Then per row, as logp_c = x_c - lse:
  //   -logp[y] = lse - x_y;  sum_c(-logp[c]) = V * lse - sum_c x_c.
  // (Ignored rows are computed too, and never read.)
  Tensor p = Tensor::empty(X.shape());
  PoolVector<RowSums> sums(N);
  softmax_rows(X.data(), p.data(), N, V, sums.data());
  const real* __restrict xp = X.data();
  const double eps = label_smoothing;
  double total = 0;
  for (int64_t r = 0; r < N; ++r) {  // in row order: deterministic
    const int64_t y = targets[r];
    if (y == ignore_index) continue;
    const double lse = sums[r].lse;
    const double nll = lse - xp[r * V + y];
    const double smooth = V * lse - sums[r].sum_x;  // sum_c(-logp[c])
    total += (1 - eps) * nll + eps / static_cast<double>(V) * smooth;
  }
  const real loss = n_valid > 0 ? static_cast<real>(total / static_cast<double>(n_valid)) : real(0);

  auto node = make_node<CrossEntropyNode>();
  node->p = p;
  node->targets.assign(targets.begin(), targets.end());
  node->ignore_index = ignore_index;
  node->n_valid = n_valid;
  node->smoothing = label_smoothing;
  return make_result(Tensor::scalar(loss), node, {logits});
}

}  // namespace qkv::nn
