// core elementwise kernels: forward values, scalar forms, NumPy broadcasting,
// error messages and sum_to (the backward of broadcasting).
#include <doctest/doctest.h>

#include "errors.h"
#include "test_seed.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/qkv_core.h"

using namespace qkv;

namespace {
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_generator;

// Checks t against expected values (float32 tolerance) and shape.
void check_values(const Tensor& t, const Shape& shape, const std::vector<double>& expect) {
  REQUIRE(t.shape() == shape);
  REQUIRE(t.numel() == static_cast<int64_t>(expect.size()));
  for (size_t i = 0; i < expect.size(); ++i) {
    INFO("element " << i);
    CHECK(t.data()[i] == doctest::Approx(expect[i]).epsilon(1e-6));
  }
}

// Reference broadcasting by explicit multi-indices (slow, obviously right).
Tensor ref_broadcast(const Tensor& a, const Tensor& b, const std::function<real(real, real)>& f) {
  const size_t r = std::max(a.dim(), b.dim());
  Shape out(r);
  Shape pa(r, 1), pb(r, 1);  // a and b padded with leading 1s
  for (size_t i = 0; i < r; ++i) {
    if (i >= r - a.dim()) pa[i] = a.shape()[i - (r - a.dim())];
    if (i >= r - b.dim()) pb[i] = b.shape()[i - (r - b.dim())];
    out[i] = std::max(pa[i], pb[i]);
  }
  Tensor y = Tensor::empty(out);
  const auto sa = strides_of(pa), sb = strides_of(pb);
  for (int64_t k = 0; k < y.numel(); ++k) {
    int64_t rem = k, ia = 0, ib = 0;
    for (int d = static_cast<int>(r) - 1; d >= 0; --d) {
      const int64_t idx = rem % out[d];
      rem /= out[d];
      if (pa[d] != 1) ia += idx * sa[d];
      if (pb[d] != 1) ib += idx * sb[d];
    }
    y.data()[k] = f(a.data()[ia], b.data()[ib]);
  }
  return y;
}
}  // namespace

// ---- binary, same shape ---------------------------------------------------------

TEST_CASE("add/sub/mul/div of same-shape tensors match hand-computed values") {
  Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_vector({5, -6, 0.5, 8}, {2, 2});
  check_values(add(a, b), {2, 2}, {6, -4, 3.5, 12});
  check_values(sub(a, b), {2, 2}, {-4, 8, 2.5, -4});
  check_values(mul(a, b), {2, 2}, {5, -12, 1.5, 32});
  check_values(div(a, b), {2, 2}, {0.2, -1.0 / 3, 6, 0.5});
  // Operators are the same functions.
  check_values(a + b, {2, 2}, {6, -4, 3.5, 12});
  check_values(a - b, {2, 2}, {-4, 8, 2.5, -4});
  check_values(a * b, {2, 2}, {5, -12, 1.5, 32});
  check_values(a / b, {2, 2}, {0.2, -1.0 / 3, 6, 0.5});
  // Inputs are untouched.
  CHECK(a.to_vector() == std::vector<real>{1, 2, 3, 4});
}

TEST_CASE("scalar forms: add/sub/rsub/mul/div/rdiv and their operators") {
  Tensor a = Tensor::from_vector({1, 2, 4});
  check_values(add(a, 1), {3}, {2, 3, 5});
  check_values(sub(a, 1), {3}, {0, 1, 3});
  check_values(rsub(1, a), {3}, {0, -1, -3});
  check_values(mul(a, -2), {3}, {-2, -4, -8});
  check_values(div(a, 4), {3}, {0.25, 0.5, 1});
  check_values(rdiv(4, a), {3}, {4, 2, 1});
  check_values(a + real(1), {3}, {2, 3, 5});
  check_values(real(1) + a, {3}, {2, 3, 5});
  check_values(a - real(1), {3}, {0, 1, 3});
  check_values(real(1) - a, {3}, {0, -1, -3});
  check_values(a * real(3), {3}, {3, 6, 12});
  check_values(real(3) * a, {3}, {3, 6, 12});
  check_values(a / real(2), {3}, {0.5, 1, 2});
  check_values(real(2) / a, {3}, {2, 1, 0.5});
  check_values(-a, {3}, {-1, -2, -4});
}

// ---- unary ------------------------------------------------------------------------

TEST_CASE("neg/exp/log/sqrt/pow match hand-computed values") {
  Tensor x = Tensor::from_vector({1, 2, 4});
  check_values(neg(x), {3}, {-1, -2, -4});
  check_values(exp(Tensor::from_vector({0, 1, -1})), {3},
               {1, 2.718281828459045, 0.36787944117144233});
  check_values(log(Tensor::from_vector({1, 2.718281828459045f, 0.5})), {3},
               {0, 1, -0.6931471805599453});
  check_values(sqrt(Tensor::from_vector({0, 4, 2})), {3}, {0, 2, 1.4142135623730951});
  check_values(pow(x, 2), {3}, {1, 4, 16});
  check_values(pow(x, 0.5), {3}, {1, 1.4142135623730951, 2});
  check_values(pow(x, -1), {3}, {1, 0.5, 0.25});
  check_values(pow(x, 3), {3}, {1, 8, 64});
  check_values(pow(x, 0), {3}, {1, 1, 1});
}

TEST_CASE("relu/gelu/tanh/sigmoid match hand-computed values") {
  Tensor x = Tensor::from_vector({-2, -1, 0, 1, 2});
  check_values(relu(x), {5}, {0, 0, 0, 1, 2});
  // gelu(x) = x * Phi(x), exact (erf) form.
  check_values(
      gelu(x), {5},
      {-0.04550026389635842, -0.15865525393145707, 0, 0.8413447460685429, 1.9544997361036416});
  check_values(
      tanh(x), {5},
      {-0.9640275800758169, -0.7615941559557649, 0, 0.7615941559557649, 0.9640275800758169});
  check_values(
      sigmoid(x), {5},
      {0.11920292202211755, 0.2689414213699951, 0.5, 0.7310585786300049, 0.8807970779778823});
  CHECK(gelu_scalar(1) == doctest::Approx(0.8413447460685429));
}

TEST_CASE("sigmoid and tanh saturate without NaN at large |x|") {
  Tensor x = Tensor::from_vector({-100, 100, -1000, 1000});
  for (real v : sigmoid(x).to_vector()) CHECK(std::isfinite(v));
  check_values(sigmoid(x), {4}, {0, 1, 0, 1});
  check_values(tanh(x), {4}, {-1, 1, -1, 1});
}

TEST_CASE("derivative kernels: relu/gelu/tanh/sigmoid/pow backward values") {
  Tensor g = Tensor::from_vector({1, 2, 3});
  Tensor x = Tensor::from_vector({-1, 0.5, 1});
  check_values(relu_backward(g, x), {3}, {0, 2, 3});
  // gelu'(x) = Phi(x) + x phi(x); gelu'(1) = 0.841345 + 0.241971.
  check_values(gelu_backward(g, x), {3},
               {1 * (0.15865525393145707 - 0.24197072451914337),
                2 * (0.6914624612740131 + 0.5 * 0.3520653267642995), 3 * 1.0833154705876864});
  CHECK(gelu_grad_scalar(0) == doctest::Approx(0.5));
  Tensor y = Tensor::from_vector({0.5, 0, -0.5});
  check_values(tanh_backward(g, y), {3}, {0.75, 2, 2.25});
  check_values(sigmoid_backward(g, y), {3}, {0.25, 0, 3 * -0.5 * 1.5});
  check_values(pow_backward(g, Tensor::from_vector({1, 2, 3}), 3), {3}, {3, 24, 81});
  const std::string msg = error_of([&] { relu_backward(g, Tensor::zeros({4})); });
  CHECK(has(msg, "relu_backward"));
  CHECK(has(msg, "(3)"));
  CHECK(has(msg, "(4)"));
}

TEST_CASE("unary ops keep the shape and work on rank-0 and empty tensors") {
  CHECK(exp(Tensor::scalar(0)).dim() == 0);
  CHECK(exp(Tensor::scalar(0)).item() == 1);
  CHECK(relu(Tensor::zeros({2, 0, 3})).shape() == Shape{2, 0, 3});
  CHECK(add(Tensor::zeros({0}), Tensor::zeros({0})).numel() == 0);
  CHECK(add(Tensor::zeros({3, 0}), Tensor::zeros({1, 0})).shape() == Shape{3, 0});
}

// ---- broadcasting -------------------------------------------------------------

TEST_CASE("broadcast (2,3) + (3) adds the row to every row") {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector({10, 20, 30});
  check_values(add(a, b), {2, 3}, {11, 22, 33, 14, 25, 36});
  check_values(add(b, a), {2, 3}, {11, 22, 33, 14, 25, 36});
  check_values(sub(b, a), {2, 3}, {9, 18, 27, 6, 15, 24});
}

TEST_CASE("broadcast (2,1,3) * (4,1) gives (2,4,3)") {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 1, 3});
  Tensor b = Tensor::from_vector({1, 10, 100, -1}, {4, 1});
  Tensor y = mul(a, b);
  REQUIRE(y.shape() == Shape{2, 4, 3});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 3; ++k) CHECK(y.at({i, j, k}) == a.at({i, 0, k}) * b.at({j, 0}));
  CHECK(y.at({1, 2, 1}) == 500);
  CHECK(mul(b, a).to_vector() == y.to_vector());
}

TEST_CASE("broadcast (4,1) - (1,5) gives the (4,5) table of differences") {
  Tensor a = Tensor::from_vector({0, 1, 2, 3}, {4, 1});
  Tensor b = Tensor::from_vector({0, 10, 20, 30, 40}, {1, 5});
  Tensor y = sub(a, b);
  REQUIRE(y.shape() == Shape{4, 5});
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 5; ++j) CHECK(y.at({i, j}) == real(i) - real(10 * j));
}

TEST_CASE("broadcast with scalar tensors on either side, and scalar with scalar") {
  Tensor s = Tensor::scalar(2);
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  check_values(mul(s, a), {2, 3}, {2, 4, 6, 8, 10, 12});
  check_values(div(a, s), {2, 3}, {0.5, 1, 1.5, 2, 2.5, 3});
  check_values(div(s, a), {2, 3}, {2, 1, 2.0 / 3, 0.5, 0.4, 1.0 / 3});
  check_values(sub(s, a), {2, 3}, {1, 0, -1, -2, -3, -4});
  Tensor y = add(s, Tensor::scalar(5));
  CHECK(y.dim() == 0);
  CHECK(y.item() == 7);
  // A one-element tensor of rank 2 broadcasts like a scalar but keeps its rank.
  Tensor one = Tensor::full({1, 1}, 3);
  check_values(add(Tensor::from_vector({1, 2}), one), {1, 2}, {4, 5});
}

TEST_CASE("broadcasting matches a naive multi-index reference on many shape pairs") {
  Generator g = test_generator();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3}, {3}},
      {{3}, {2, 3}},
      {{2, 1, 3}, {4, 1}},
      {{4, 1}, {1, 5}},
      {{2, 1}, {3, 1, 1}},
      {{1, 4, 1}, {3, 1, 2}},
      {{5, 1, 3}, {5, 2, 1}},
      {{2, 3, 4}, {3, 1}},
      {{1}, {2, 2}},
      {{2, 2, 1, 2}, {2, 1, 2, 1}},
      // big enough that the row loop runs in parallel (rows >= grain / inner)
      {{300, 1, 64}, {1, 40, 64}},
      {{70000, 1}, {1, 3}}};
  const std::vector<std::pair<const char*, std::function<real(real, real)>>> ops = {
      {"add", [](real x, real y) { return x + y; }},
      {"sub", [](real x, real y) { return x - y; }},
      {"mul", [](real x, real y) { return x * y; }},
      {"div", [](real x, real y) { return x / y; }}};
  for (const auto& [sa, sb] : cases) {
    Tensor a = Tensor::uniform(sa, 0.5, 2, g), b = Tensor::uniform(sb, 0.5, 2, g);
    for (const auto& [name, f] : ops) {
      INFO(name << " " << to_string(sa) << " " << to_string(sb));
      const std::string op = name;
      Tensor y = op == "add"   ? add(a, b)
                 : op == "sub" ? sub(a, b)
                 : op == "mul" ? mul(a, b)
                               : div(a, b);
      Tensor r = ref_broadcast(a, b, f);
      REQUIRE(y.shape() == r.shape());
      CHECK(max_abs_diff(y, r) == 0);
    }
  }
}

TEST_CASE("shapes that do not broadcast: the error names the op and both shapes") {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"add", [&] { add(a, b); }},
      {"sub", [&] { sub(a, b); }},
      {"mul", [&] { mul(a, b); }},
      {"div", [&] { div(a, b); }}};
  for (const auto& [op, call] : calls) {
    const std::string msg = error_of(call);
    INFO(msg);
    CHECK(has(msg, op + ": shapes (2,3) and (4) do not broadcast"));
  }
  const std::string msg = error_of([] { add(Tensor::zeros({4, 1, 3}), Tensor::zeros({2, 2, 1})); });
  CHECK(has(msg, "add: shapes (4,1,3) and (2,2,1) do not broadcast"));
}

TEST_CASE("binary ops with an undefined tensor throw, naming the op") {
  CHECK(has(error_of([] { add(Tensor(), Tensor::zeros({1})); }), "add: tensor is undefined"));
  CHECK(has(error_of([] { exp(Tensor()); }), "exp: tensor is undefined"));
}

// ---- sum_to -----------------------------------------------------------------

TEST_CASE("sum_to reduces a broadcast gradient back to the input shape") {
  Tensor g = Tensor::arange(6).reshape({2, 3});  // [[0,1,2],[3,4,5]]
  check_values(sum_to(g, {3}), {3}, {3, 5, 7});
  check_values(sum_to(g, {1, 3}), {1, 3}, {3, 5, 7});
  check_values(sum_to(g, {2, 1}), {2, 1}, {3, 12});
  check_values(sum_to(g, {}), {}, {15});
  check_values(sum_to(g, {1, 1}), {1, 1}, {15});
  CHECK(sum_to(g, {2, 3}).to_vector() == g.to_vector());
  // (2,3,4) -> (3,1): sum over axis 0 and the last axis.
  Tensor h = Tensor::arange(24).reshape({2, 3, 4});
  Tensor r = sum_to(h, {3, 1});
  REQUIRE(r.shape() == Shape{3, 1});
  for (int64_t j = 0; j < 3; ++j) {
    real s = 0;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t k = 0; k < 4; ++k) s += h.at({i, j, k});
    CHECK(r.at({j, 0}) == s);
  }
  // (2,3,4) -> (2,1,4): sum over the middle axis only.
  Tensor m = sum_to(h, {2, 1, 4});
  CHECK(m.at({1, 0, 2}) == h.at({1, 0, 2}) + h.at({1, 1, 2}) + h.at({1, 2, 2}));
}

TEST_CASE("sum_to is the adjoint of broadcasting: <broadcast(x), g> == <x, sum_to(g)>") {
  Generator gen = test_generator();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4, 1}, {4, 5}}, {{1, 5}, {4, 5}},    {{3, 1, 2}, {3, 4, 2}}, {{2}, {6, 3, 2}},
      {{1, 1}, {3, 3}}, {{512}, {100, 512}}, {{100, 1}, {100, 512}}};
  for (const auto& [small, big] : cases) {
    INFO(to_string(small) << " -> " << to_string(big));
    Tensor x = Tensor::normal(small, 0, 1, gen), g = Tensor::normal(big, 0, 1, gen);
    Tensor bx = add(x, Tensor::zeros(big));  // broadcast x to big
    Tensor sx = sum_to(g, small);
    CHECK(sx.shape() == small);
    double lhs = 0, rhs = 0;
    for (int64_t i = 0; i < g.numel(); ++i) lhs += double(bx.data()[i]) * g.data()[i];
    for (int64_t i = 0; i < x.numel(); ++i) rhs += double(x.data()[i]) * sx.data()[i];
    CHECK(lhs == doctest::Approx(rhs).epsilon(1e-4));
  }
}

TEST_CASE("sum_to rejects a shape that does not broadcast to the gradient") {
  Tensor g = Tensor::zeros({2, 3});
  std::string msg = error_of([&] { sum_to(g, {4}); });
  CHECK(has(msg, "sum_to"));
  CHECK(has(msg, "(2,3)"));
  CHECK(has(msg, "(4)"));
  msg = error_of([&] { sum_to(g, {2, 2, 3}); });
  CHECK(has(msg, "sum_to"));
  CHECK(has(msg, "(2,2,3)"));
}

TEST_CASE("max_abs_diff and allclose compare tensors elementwise") {
  Tensor a = Tensor::from_vector({1, 2, 3}), b = Tensor::from_vector({1, 2.5, 3});
  CHECK(max_abs_diff(a, b) == doctest::Approx(0.5));
  CHECK(allclose(a, a));
  CHECK_FALSE(allclose(a, b));
  CHECK(allclose(a, b, 0, 0.6));
  CHECK_FALSE(allclose(a, Tensor::from_vector({1, 2, 3}, {1, 3})));
  CHECK(std::isnan(max_abs_diff(a, Tensor::from_vector({1, NAN, 3}))));
  CHECK(has(error_of([&] { max_abs_diff(a, Tensor::zeros({2})); }), "max_abs_diff"));
}
