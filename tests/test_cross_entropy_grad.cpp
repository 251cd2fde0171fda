// Cross-entropy in float64: the fused backward against finite differences,
// and the fused loss against -sum(log_softmax(logits) * q) / n_valid composed
// from primitive ops, q the (smoothed) target distribution as a constant.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/qkv_autograd.h"
#include "fused_vs_composed.h"
#include "nn/cross_entropy.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::test_generator;
using qkv::testing::test_seed;

namespace {

struct CrossEntropyCase {
  Shape shape;  // logits (N, V) or (B, T, V)
  std::vector<int64_t> targets;
  int64_t ignore_index;
  real eps;
};

testing::VarFn fused(const CrossEntropyCase& c) {
  return [c](const std::vector<Var>& v) {
    return nn::cross_entropy(v[0], c.targets, c.ignore_index, c.eps);
  };
}

// q (N, V): (1 - eps) onehot(y) + eps / V on kept rows, 0 on ignored rows;
// loss = -sum(logp * q) / n_valid.
testing::VarFn composed(const CrossEntropyCase& c) {
  return [c](const std::vector<Var>& v) {
    const int64_t V = c.shape.back(), N = numel(c.shape) / V;
    Tensor q = Tensor::zeros({N, V});
    int64_t n_valid = 0;
    for (int64_t i = 0; i < N; ++i) {
      if (c.targets[i] == c.ignore_index) continue;
      ++n_valid;
      for (int64_t k = 0; k < V; ++k) q.at({i, k}) = c.eps / V;
      q.at({i, c.targets[i]}) += 1 - c.eps;
    }
    Var logp = log_softmax(reshape(v[0], {N, V}));  // (N, V)
    return neg(sum(logp * Var(q))) / static_cast<real>(n_valid);
  };
}

Var logits_for(const CrossEntropyCase& c, uint64_t seed) {
  Generator g(seed);
  return Var(Tensor::normal(c.shape, 0, 2, g), true);
}

const CrossEntropyCase kPlain{{5, 4}, {0, 3, 1, 1, 2}, -100, 0};
const CrossEntropyCase kSmoothIgnored{
    {6, 5}, {2, 0, 4, 0, 1, 3}, 0, 0.2};  // ignore_index 0: rows 1 and 3 ignored
const CrossEntropyCase k3D{{2, 3, 4}, {1, -100, 3, 0, 2, -100}, -100, 0.1};

}  // namespace

TEST_CASE("cross_entropy backward matches finite differences (no smoothing, nothing ignored)") {
  auto r = gradcheck(fused(kPlain), {logits_for(kPlain, test_seed())});
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("cross_entropy backward matches finite differences with smoothing and ignored rows") {
  auto r = gradcheck(fused(kSmoothIgnored), {logits_for(kSmoothIgnored, test_seed())});
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("cross_entropy backward matches finite differences on (B, T, V) logits") {
  auto r = gradcheck(fused(k3D), {logits_for(k3D, test_seed())});
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("cross_entropy fused equals -sum(log_softmax * onehot) / N composed from ops") {
  testing::check_fused_equals_composed(fused(kPlain), composed(kPlain),
                                       {logits_for(kPlain, test_seed())});
}

TEST_CASE("cross_entropy fused equals composed with label smoothing and ignored rows") {
  testing::check_fused_equals_composed(fused(kSmoothIgnored), composed(kSmoothIgnored),
                                       {logits_for(kSmoothIgnored, test_seed())});
}

TEST_CASE("cross_entropy fused equals composed on (B, T, V) logits with smoothing and ignores") {
  testing::check_fused_equals_composed(fused(k3D), composed(k3D), {logits_for(k3D, test_seed())});
}

TEST_CASE("cross_entropy equals the textbook per-row formula with smoothing (hand loop)") {
  // loss_i = (1 - eps)(-logp[y]) + eps/V sum_c(-logp[c]), mean over kept rows
  const CrossEntropyCase& c = kSmoothIgnored;
  Var x = logits_for(c, test_seed());
  const int64_t V = 5;
  double total = 0;
  int n = 0;
  for (int64_t i = 0; i < 6; ++i) {
    if (c.targets[i] == c.ignore_index) continue;
    double se = 0;
    for (int64_t k = 0; k < V; ++k) se += std::exp(x.data().at({i, k}));
    const double lse = std::log(se);
    double smooth = 0;
    for (int64_t k = 0; k < V; ++k) smooth += lse - x.data().at({i, k});
    total += (1 - c.eps) * (lse - x.data().at({i, c.targets[i]})) + c.eps / V * smooth;
    ++n;
  }
  CHECK(nn::cross_entropy(x, c.targets, c.ignore_index, c.eps).item() ==
        doctest::Approx(total / n).epsilon(1e-12));
}

TEST_CASE("cross_entropy with every row ignored is 0 with a zero gradient, not NaN") {
  Generator g = test_generator();
  Var x(Tensor::normal({3, 4}, 0, 1, g), true);
  Var loss = nn::cross_entropy(x, {-100, -100, -100}, -100, 0.1);
  CHECK(loss.item() == 0);
  loss.backward();
  REQUIRE(x.grad().defined());
  CHECK(max_abs_diff(x.grad(), Tensor::zeros({3, 4})) == 0);
}

TEST_CASE("cross_entropy is stable for huge logits (max subtracted before exp)") {
  CrossEntropyCase c{{2, 3}, {0, 2}, -100, 0.1};
  Var x(Tensor::from_vector({1000, 0, -1000, 500, 500, 1e4}, {2, 3}), true);
  auto r = gradcheck(fused(c), {x});
  INFO(r.report);
  CHECK(r.ok);
  Var loss = nn::cross_entropy(x, c.targets, c.ignore_index, c.eps);
  CHECK(std::isfinite(loss.item()));
}
