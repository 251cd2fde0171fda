// Embedding (and the position tables added to it) in float64: the fused
// scatter-add backward against finite differences, and the lookup against
// the same thing as a one-hot matrix product composed from primitive ops.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/qkv_autograd.h"
#include "fused_vs_composed.h"
#include "nn/embedding.h"
#include "nn/positional.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::test_generator;
using qkv::testing::test_seed;

namespace {

// (B, T) = (2, 4) ids over V = 6, with repeats (3 three times) and unused rows (5).
const std::vector<int64_t> kIds{3, 0, 3, 1, 4, 3, 2, 0};
const Shape kShape{2, 4};
constexpr int64_t kV = 6, kD = 5;

// onehot (B*T, V) x weight (V, D) -> (B*T, D) -> (B, T, D), times scale
Var composed_embedding(const Var& w, real scale) {
  const int64_t n = static_cast<int64_t>(kIds.size());
  Tensor onehot = Tensor::zeros({n, kV});
  for (int64_t i = 0; i < n; ++i) onehot.at({i, kIds[i]}) = 1;
  return reshape(matmul(Var(onehot), w), {kShape[0], kShape[1], kD}) * scale;
}

Var weight(uint64_t seed) {
  Generator g(seed);
  return Var(Tensor::normal({kV, kD}, 0, 1, g), true).set_name("weight");
}

}  // namespace

TEST_CASE("embedding backward (scatter-add with repeated ids) matches finite differences") {
  auto r = gradcheck([](const std::vector<Var>& v) { return nn::embedding(v[0], kIds, kShape); },
                     {weight(test_seed())});
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == kV * kD);
}

TEST_CASE("embedding with scale sqrt(D) backward matches finite differences") {
  const real s = std::sqrt(static_cast<real>(kD));
  auto r =
      gradcheck([s](const std::vector<Var>& v) { return nn::embedding(v[0], kIds, kShape, s); },
                {weight(test_seed())});
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("embedding fused equals a one-hot matmul composed from ops (output and dweight)") {
  testing::check_fused_equals_composed(
      [](const std::vector<Var>& v) { return nn::embedding(v[0], kIds, kShape); },
      [](const std::vector<Var>& v) { return composed_embedding(v[0], 1); }, {weight(test_seed())});
}

TEST_CASE("embedding with scale fused equals scale * one-hot matmul composed from ops") {
  testing::check_fused_equals_composed(
      [](const std::vector<Var>& v) { return nn::embedding(v[0], kIds, kShape, 2.5); },
      [](const std::vector<Var>& v) { return composed_embedding(v[0], 2.5); },
      {weight(test_seed())});
}

TEST_CASE("embedding gives a never-looked-up row exactly zero gradient") {
  Var w = weight(test_seed());
  Var y = nn::embedding(w, kIds, kShape);
  y.backward(Tensor::ones(y.shape()));
  for (int64_t j = 0; j < kD; ++j) {
    CHECK(w.grad().at({5, j}) == 0);  // id 5 is never used
    CHECK(w.grad().at({3, j}) == 3);  // id 3 three times
  }
}

TEST_CASE("add_positions backward matches finite differences for x and the learned table") {
  Generator g = test_generator();
  Var x(Tensor::normal({2, 3, 4}, 0, 1, g), true);
  Var table(Tensor::normal({5, 4}, 0, 1, g), true);  // max_len 5 > T 3: rows 3, 4 get 0
  auto r = gradcheck([](const std::vector<Var>& v) { return nn::add_positions(v[0], v[1]); },
                     {x, table});
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 24 + 20);
}

TEST_CASE("LearnedPositionalEmbedding fused equals x + weight[:T] composed from ops") {
  Generator g = test_generator();
  nn::LearnedPositionalEmbedding pos(6, 4, g);
  Var x(Tensor::normal({2, 3, 4}, 0, 1, g), true);
  // weight[:T] via a constant (T, max_len) selector: rows 0..T-1 of the identity
  Tensor sel = Tensor::zeros({3, 6});
  for (int64_t t = 0; t < 3; ++t) sel.at({t, t}) = 1;
  testing::check_fused_equals_composed(
      [&](const std::vector<Var>& v) { return pos(v[0]); },
      [&](const std::vector<Var>& v) { return v[0] + matmul(Var(sel), v[1]); }, {x, pos.weight});
}
