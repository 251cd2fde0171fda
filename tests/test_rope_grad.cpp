// Rotary position embedding in float64: the backward (the inverse rotation)
// against finite differences, the fused op against the same rotation composed
// from primitive ops, and the property it exists for: a rotated query and key
// score the same at every pair of positions with the same offset.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/qkv_autograd.h"
#include "fused_vs_composed.h"
#include "nn/rope.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::test_generator;

namespace {

constexpr int64_t kHeads = 2;

// y = x * C + (x P) * S: C and S hold cos and sin of each pair's angle (both
// numbers of a pair get the same), P (E, E) maps (x_2i, x_2i+1) to
// (-x_2i+1, x_2i), a quarter turn of every pair.
Var composed_rope(const Var& x, int64_t pos0) {
  const int64_t T = x.size(1), E = x.size(2), d_k = E / kHeads;
  Tensor C = Tensor::zeros({T, E}), S = Tensor::zeros({T, E}), P = Tensor::zeros({E, E});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < E; ++j) {
      const int64_t i = (j % d_k) / 2;  // the pair within the head
      const double a = static_cast<double>(pos0 + t) * std::pow(10000.0, -2.0 * i / d_k);
      C.at({t, j}) = std::cos(a);
      S.at({t, j}) = std::sin(a);
    }
  for (int64_t j = 0; j < E; j += 2) {
    P.at({j + 1, j}) = -1;  // (x P)_2i   = -x_2i+1
    P.at({j, j + 1}) = 1;   // (x P)_2i+1 =  x_2i
  }
  return x * Var(C) + matmul(x, Var(P)) * Var(S);
}

}  // namespace

TEST_CASE(
    "rope backward (the inverse rotation) matches finite differences, from position 0 and 7") {
  Generator g = test_generator();
  for (int64_t pos0 : {0, 7}) {
    CAPTURE(pos0);
    Var x(Tensor::normal({2, 5, kHeads * 6}, 0, 1, g), true);
    auto r = gradcheck(
        [&](const std::vector<Var>& v) { return nn::rope(v[0], kHeads, 10000, pos0); }, {x});
    INFO(r.report);
    CHECK(r.ok);
    CHECK(r.checked == 2 * 5 * 12);
  }
}

TEST_CASE(
    "rope fused equals the rotation composed from primitive ops (mul, matmul by a quarter turn)") {
  Generator g = test_generator();
  for (int64_t pos0 : {0, 3}) {
    CAPTURE(pos0);
    Var x(Tensor::normal({3, 9, kHeads * 8}, 0, 1, g), true);
    testing::check_fused_equals_composed(
        [&](const std::vector<Var>& v) { return nn::rope(v[0], kHeads, 10000, pos0); },
        [&](const std::vector<Var>& v) { return composed_rope(v[0], pos0); }, {x});
  }
}

TEST_CASE(
    "rope makes a query-key score depend on the offset only: (t, s) scores as (t + 5, s + 5)") {
  Generator g = test_generator();
  const int64_t d_k = 8;
  const Tensor q = Tensor::normal({1, 1, d_k}, 0, 1, g), k = Tensor::normal({1, 1, d_k}, 0, 1, g);
  auto score = [&](int64_t t, int64_t s) {
    const Tensor rq = nn::rope(Var(q), 1, 10000, t).data(),
                 rk = nn::rope(Var(k), 1, 10000, s).data();
    double dot = 0;
    for (int64_t j = 0; j < d_k; ++j) dot += rq.data()[j] * rk.data()[j];
    return dot;
  };
  for (auto [t, s] : {std::pair<int64_t, int64_t>{0, 3}, {4, 1}, {10, 10}, {2, 40}}) {
    CAPTURE(t);
    CAPTURE(s);
    CHECK(score(t + 5, s + 5) == doctest::Approx(score(t, s)).epsilon(1e-12));
  }
  // and it does depend on the offset
  CHECK(std::abs(score(0, 3) - score(0, 4)) > 1e-6);
}
