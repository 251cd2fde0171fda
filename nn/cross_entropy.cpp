// Cross-entropy with label smoothing as one fused op, read top to bottom:
//   1. the maths, forward and backward;
//   2. the forward kernel: softmax, then the smoothed loss of each row;
//   3. the backward kernel: (p - q) / n_valid;
//   4. the Node adapter: what is saved, and the call of the backward kernel;
//   5. cross_entropy, the public op: checks, forward kernel, node.
// docs/cross-entropy.md derives the gradient step by step.
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

// ============================================================================
// 1. The maths
// ============================================================================
// Logits x (N, V), one target y per row, smoothing eps (the argument
// label_smoothing; `smoothing` below; the ε of PyTorch's docs). Per row:
//
//   lse    = log sum_c exp(x_c),   logp_c = x_c - lse,   p = softmax(x)
//   q_c    = (1 - eps) [c == y] + eps / V      the smoothed target, sums to 1
//   loss_r = -sum_c q_c logp_c
//          = (1 - eps) (lse - x_y) + eps / V (V lse - sum_c x_c)
//   loss   = sum of loss_r over the counted rows (y != ignore_index) / n_valid
//
// Backward: d lse / dx_c = p_c, and sum_c q_c = 1, so
//   d loss_r / dx_c = sum_k q_k (p_c - [c == k]) = p_c - q_c
// and with dL/dloss = g:
//   dx[r, c] = g (p_c - q_c) / n_valid   for a counted row, 0 for an ignored one.
//
// Saved for backward: p (N, V), the targets and n_valid. q is rebuilt from
// the targets, eps and V. Ignored rows of p are computed but never read.

// ============================================================================
// 2. The forward kernel
// ============================================================================
// x (N, V) -> p (N, V), and the sum of loss_r over the counted rows. The core
// row softmax gives each row's lse and sum_c x_c with p, in its passes over
// the row; the row losses are added in row order, in double, so the result
// does not depend on the thread count.
double cross_entropy_forward(const real* x, const int64_t* targets, int64_t N, int64_t V,
                             int64_t ignore_index, real smoothing, real* p) {
  PoolVector<RowSums> sums(N);  // (N): lse and sum_c x_c of each row
  softmax_rows(x, p, N, V, sums.data());
  const double eps = smoothing;
  double total = 0;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t y = targets[r];
    if (y == ignore_index) continue;
    const double lse = sums[r].lse;
    const double nll = lse - x[r * V + y];       // -logp_y
    const double all = V * lse - sums[r].sum_x;  // sum_c -logp_c
    total += (1 - eps) * nll + eps / static_cast<double>(V) * all;
  }
  return total;
}

// ============================================================================
// 3. The backward kernel
// ============================================================================
// p (N, V) -> dx (N, V) = scale (p - q), scale = g / n_valid; ignored rows 0.
// q is eps / V off the target and 1 - eps + eps / V at it, so each row is
// (p_c - eps / V) scale, then (1 - eps) scale taken off at c = y.
void cross_entropy_backward(const real* __restrict p, const int64_t* targets, int64_t N, int64_t V,
                            int64_t ignore_index, real smoothing, real scale, real* __restrict dx) {
  const real off = smoothing / static_cast<real>(V);  // q_c for c != y
  const real on = real(1) - smoothing;                // q_y - off
  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          real* __restrict dr = dx + r * V;  // (V): row r of dx
          const int64_t y = targets[r];
          if (y == ignore_index) {
            std::fill(dr, dr + V, real(0));
            continue;
          }
          const real* __restrict pr = p + r * V;  // (V): row r of p
#pragma omp simd
          for (int64_t c = 0; c < V; ++c) dr[c] = (pr[c] - off) * scale;
          dr[y] -= on * scale;
        }
      },
      grain_for(V));
}

// ============================================================================
// 4. The Node adapter
// ============================================================================
struct CrossEntropyNode : Node {
  Tensor p;                     // (N, V) (or (B, T, V)): the softmax of the logits
  PoolVector<int64_t> targets;  // (N); pooled: a copy is made every step
  int64_t ignore_index = -100;
  int64_t n_valid = 0;  // rows whose target is not ignore_index
  real smoothing = 0;
  const char* name() const override { return "cross_entropy"; }
  OpDoc doc() const override {
    return {
        "loss = mean over counted rows of -sum_c q_c logp_c,  logp = log_softmax(x)  (q: the "
        "smoothed one-hot)",
        "dx = g (p - q) / n_valid,  p = softmax(x)  (0 for an ignored row)",
        "docs/cross-entropy.md#backward-step-by-step"};
  }

  TensorList backward(const Tensor& g) override {
    const int64_t V = p.size(-1), N = p.numel() / V;
    Tensor dx = Tensor::empty(p.shape());  // the logits' shape
    const real scale = n_valid > 0 ? g.item() / static_cast<real>(n_valid) : real(0);
    cross_entropy_backward(p.data(), targets.data(), N, V, ignore_index, smoothing, scale,
                           dx.data());
    return {dx};
  }
  void release_saved() override {
    p = Tensor();
    targets = PoolVector<int64_t>();
  }
};

// ============================================================================
// 5. The public op
// ============================================================================
namespace {
// The shape, target and smoothing checks. Returns n_valid, the counted rows.
int64_t check_cross_entropy_args(const Tensor& X, const std::vector<int64_t>& targets,
                                 int64_t ignore_index, real label_smoothing) {
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
  for (int64_t r = 0; r < N; ++r) {
    const int64_t y = targets[r];
    if (y == ignore_index) continue;
    if (y < 0 || y >= V)
      throw Error("cross_entropy: target " + std::to_string(y) + " at index " + std::to_string(r) +
                  " is out of range [0, V) with V = " + std::to_string(V) +
                  " (and is not ignore_index " + std::to_string(ignore_index) + ")");
    ++n_valid;
  }
  return n_valid;
}
}  // namespace

Var cross_entropy(const Var& logits, const std::vector<int64_t>& targets, int64_t ignore_index,
                  real label_smoothing) {
  const Tensor& X = logits.data();  // (N, V) or (B, T, V)
  const int64_t n_valid = check_cross_entropy_args(X, targets, ignore_index, label_smoothing);
  const int64_t V = X.size(-1), N = X.numel() / V;

  Tensor p = Tensor::empty(X.shape());  // the softmax, kept for backward
  const double total = cross_entropy_forward(X.data(), targets.data(), N, V, ignore_index,
                                             label_smoothing, p.data());
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
