// core reductions (sum/mean/max over an axis or everything) and the softmax
// family: values, keepdim, negative axes, errors, numerical stability.
#include <doctest/doctest.h>

#include "errors.h"
#include "test_seed.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/qkv_core.h"

using namespace qkv;

namespace {
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_generator;

void check_values(const Tensor& t, const Shape& shape, const std::vector<double>& expect,
                  double eps = 1e-6) {
  REQUIRE(t.shape() == shape);
  REQUIRE(t.numel() == static_cast<int64_t>(expect.size()));
  for (size_t i = 0; i < expect.size(); ++i) {
    INFO("element " << i);
    CHECK(t.data()[i] == doctest::Approx(expect[i]).epsilon(eps));
  }
}

// x[i,j,k] = 100 i + 10 j + k: every element tells where it sits.
Tensor cube() {
  Tensor x = Tensor::empty({2, 3, 4});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) x.at({i, j, k}) = real(100 * i + 10 * j + k);
  return x;
}
constexpr real kInf = std::numeric_limits<real>::infinity();
}  // namespace

// ---- sum / mean / max over an axis --------------------------------------------

TEST_CASE("sum over each axis of a (2,3,4) tensor, keepdim false and true") {
  Tensor x = cube();
  // axis 0: x[0,j,k] + x[1,j,k] = 100 + 20 j + 2 k
  Tensor s0 = sum(x, 0);
  REQUIRE(s0.shape() == Shape{3, 4});
  for (int64_t j = 0; j < 3; ++j)
    for (int64_t k = 0; k < 4; ++k) CHECK(s0.at({j, k}) == 100 + 20 * j + 2 * k);
  // axis 1: 300 i + 30 + 3 k
  Tensor s1 = sum(x, 1, true);
  REQUIRE(s1.shape() == Shape{2, 1, 4});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 4; ++k) CHECK(s1.at({i, 0, k}) == 300 * i + 30 + 3 * k);
  // axis 2: 400 i + 40 j + 6
  Tensor s2 = sum(x, 2);
  REQUIRE(s2.shape() == Shape{2, 3});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) CHECK(s2.at({i, j}) == 400 * i + 40 * j + 6);
  CHECK(sum(x, 2, true).shape() == Shape{2, 3, 1});
  CHECK(sum(x, 0, true).shape() == Shape{1, 3, 4});
}

TEST_CASE("negative axes count from the end") {
  Tensor x = cube();
  CHECK(sum(x, -1).to_vector() == sum(x, 2).to_vector());
  CHECK(sum(x, -2, true).to_vector() == sum(x, 1, true).to_vector());
  CHECK(sum(x, -2, true).shape() == Shape{2, 1, 4});
  CHECK(sum(x, -3).to_vector() == sum(x, 0).to_vector());
  CHECK(mean(x, -1).to_vector() == mean(x, 2).to_vector());
  CHECK(max(x, -2).to_vector() == max(x, 1).to_vector());
}

TEST_CASE("mean over an axis divides the sum by that axis' length") {
  Tensor x = cube();
  check_values(mean(x, 2), {2, 3}, {1.5, 11.5, 21.5, 101.5, 111.5, 121.5});
  check_values(mean(x, 0, true), {1, 3, 4}, {50, 51, 52, 53, 60, 61, 62, 63, 70, 71, 72, 73});
  check_values(mean(x, 1), {2, 4}, {10, 11, 12, 13, 110, 111, 112, 113});
}

TEST_CASE("max over an axis picks the largest, including negatives and ties") {
  Tensor x = Tensor::from_vector({-5, -2, -9, 3, 3, 1}, {2, 3});
  check_values(max(x, 1), {2}, {-2, 3});
  check_values(max(x, 0), {3}, {3, 3, 1});
  check_values(max(x, -1, true), {2, 1}, {-2, 3});
  check_values(max(cube(), 1), {2, 4}, {20, 21, 22, 23, 120, 121, 122, 123});
  // max_with_index reports the flat index of the winner; the first on ties.
  std::vector<int64_t> idx;
  Tensor m = max_with_index(x, 1, false, idx);
  REQUIRE(idx.size() == 2);
  CHECK(idx[0] == 1);
  CHECK(idx[1] == 3);  // 3 at flat 3 and 4: the first wins
  max_with_index(x, 0, true, idx);
  CHECK(idx == std::vector<int64_t>{3, 4, 5});
  CHECK(max(Tensor::from_vector({-kInf, -kInf})).item() == -kInf);
}

TEST_CASE("sum/mean/max over all elements return a rank-0 tensor") {
  Tensor x = cube();
  Tensor s = sum(x);
  CHECK(s.dim() == 0);
  // sum_ijk (100 i + 10 j + k) = 100*1*12 + 10*3*8 + 6*6
  CHECK(s.item() == 12 * 100 + 8 * 30 + 6 * 6);
  CHECK(mean(x).dim() == 0);
  CHECK(mean(x).item() == doctest::Approx((12 * 100 + 8 * 30 + 6 * 6) / 24.0));
  CHECK(max(x).dim() == 0);
  CHECK(max(x).item() == 123);
  CHECK(max(Tensor::from_vector({-3, -1, -2})).item() == -1);
  // Over a rank-0 tensor: the value itself.
  CHECK(sum(Tensor::scalar(4)).item() == 4);
  CHECK(max(Tensor::scalar(4)).item() == 4);
  // Sum of an empty tensor is 0.
  CHECK(sum(Tensor::zeros({0, 3})).item() == 0);
}

TEST_CASE("large sums (parallel rows) agree with a double-precision reference") {
  Generator g = test_generator();
  Tensor x = Tensor::uniform({257, 1031}, -1, 1, g);
  Tensor s = sum(x, 1), c = sum(x, 0);
  for (int64_t i = 0; i < 257; i += 37) {
    double ref = 0;
    for (int64_t k = 0; k < 1031; ++k) ref += x.at({i, k});
    CHECK(s.at({i}) == doctest::Approx(ref).epsilon(1e-4));
  }
  for (int64_t k = 0; k < 1031; k += 101) {
    double ref = 0;
    for (int64_t i = 0; i < 257; ++i) ref += x.at({i, k});
    CHECK(c.at({k}) == doctest::Approx(ref).epsilon(1e-4));
  }
}

TEST_CASE("a bad axis is an error naming the op, the axis and the shape") {
  Tensor x = Tensor::zeros({2, 3});
  for (const char* op : {"sum", "mean", "max"}) {
    const std::string o = op;
    for (int axis : {2, -3}) {
      const std::string msg = error_of([&] {
        if (o == "sum")
          sum(x, axis);
        else if (o == "mean")
          mean(x, axis);
        else
          max(x, axis);
      });
      INFO(msg);
      CHECK(has(msg, o + ": axis " + std::to_string(axis)));
      CHECK(has(msg, "(2,3)"));
    }
  }
  CHECK(has(error_of([] { sum(Tensor::scalar(1), 0); }), "sum"));
  CHECK(has(error_of([] { max(Tensor::zeros({0})); }), "max: empty"));
  CHECK(has(error_of([] { mean(Tensor::zeros({0})); }), "mean: empty"));
  CHECK(has(error_of([] { max(Tensor::zeros({2, 0}), 1); }), "(2,0)"));
  CHECK(has(error_of([] { mean(Tensor::zeros({2, 0}), 1); }), "(2,0)"));
}

// ---- softmax family ------------------------------------------------------------

TEST_CASE("softmax([1,0,1,0]) = [0.366, 0.134, 0.366, 0.134]") {
  Tensor y = softmax(Tensor::from_vector({1, 0, 1, 0}));
  // e / (2e + 2) and 1 / (2e + 2)
  check_values(
      y, {4}, {0.36552928931500245, 0.13447071068499755, 0.36552928931500245, 0.13447071068499755});
  CHECK(y.at({0}) == doctest::Approx(0.366).epsilon(1e-3));
  CHECK(y.at({1}) == doctest::Approx(0.134).epsilon(1e-3));
}

TEST_CASE("softmax works row by row over the last axis; rows sum to 1") {
  Tensor x = Tensor::from_vector({0, 0, 0, 1, 2, 3, -1, 5, 2}, {3, 3});
  Tensor y = softmax(x);
  REQUIRE(y.shape() == Shape{3, 3});
  check_values(y.slice0(0, 1), {1, 3}, {1.0 / 3, 1.0 / 3, 1.0 / 3});
  const double z = 1 + std::exp(1.0) + std::exp(2.0);
  check_values(y.slice0(1, 2), {1, 3}, {1 / z, std::exp(1.0) / z, std::exp(2.0) / z});
  Tensor rows = sum(y, -1);
  for (real r : rows.to_vector()) CHECK(r == doctest::Approx(1).epsilon(1e-6));
  // Higher rank: (2,2,3) treated as 4 rows of 3.
  Generator g = test_generator();
  Tensor h = Tensor::normal({2, 2, 3}, 0, 3, g);
  Tensor hy = softmax(h);
  CHECK(hy.shape() == h.shape());
  for (real r : sum(hy, -1).to_vector()) CHECK(r == doctest::Approx(1).epsilon(1e-6));
}

TEST_CASE("log_softmax equals log(softmax) and is x - logsumexp(x)") {
  Tensor x = Tensor::from_vector({1, 0, 1, 0, 3, -2, 0.5, 7}, {2, 4});
  Tensor ls = log_softmax(x);
  Tensor ref = log(softmax(x));
  CHECK(max_abs_diff(ls, ref) < 1e-6);
  const double lse = std::log(2 * std::exp(1.0) + 2);
  check_values(ls.slice0(0, 1), {1, 4}, {1 - lse, -lse, 1 - lse, -lse});
}

TEST_CASE("softmax and log_softmax are stable for large inputs (1000, 1001)") {
  Tensor x = Tensor::from_vector({1000, 1001, 1000, 1001}, {2, 2});
  Tensor y = softmax(x);
  for (real v : y.to_vector()) CHECK(std::isfinite(v));
  const double p = 1 / (1 + std::exp(1.0));  // e^1000 / (e^1000 + e^1001)
  check_values(y, {2, 2}, {p, 1 - p, p, 1 - p});
  Tensor ly = log_softmax(x);
  for (real v : ly.to_vector()) CHECK(std::isfinite(v));
  check_values(ly, {2, 2}, {std::log(p), std::log(1 - p), std::log(p), std::log(1 - p)});
  // Very negative inputs too.
  Tensor n = softmax(Tensor::from_vector({-1000, -1001}));
  check_values(n, {2}, {1 - p, p});
}

TEST_CASE("softmax of a fully -inf row gives zeros; partly -inf rows mask those entries") {
  Tensor x = Tensor::from_vector({-kInf, -kInf, -kInf, 0, -kInf, 0}, {2, 3});
  Tensor y = softmax(x);
  check_values(y, {2, 3}, {0, 0, 0, 0.5, 0, 0.5});
  for (real v : y.to_vector()) CHECK_FALSE(std::isnan(v));
  Tensor ly = log_softmax(Tensor::from_vector({0, -kInf, 0}));
  CHECK(ly.at({0}) == doctest::Approx(-std::log(2.0)));
  CHECK(ly.at({1}) == -kInf);
}

TEST_CASE("softmax_backward and log_softmax_backward match their formulas") {
  Tensor y = softmax(Tensor::from_vector({0.5, -1, 2}));
  Tensor g = Tensor::from_vector({1, -2, 0.5});
  double dot = 0;
  for (int64_t k = 0; k < 3; ++k) dot += y.at({k}) * g.at({k});
  Tensor dx = softmax_backward(g, y);
  for (int64_t k = 0; k < 3; ++k)
    CHECK(dx.at({k}) == doctest::Approx(y.at({k}) * (g.at({k}) - dot)).epsilon(1e-6));
  Tensor ly = log_softmax(Tensor::from_vector({0.5, -1, 2}));
  Tensor ldx = log_softmax_backward(g, ly);
  const double gs = 1 - 2 + 0.5;
  for (int64_t k = 0; k < 3; ++k)
    CHECK(ldx.at({k}) == doctest::Approx(g.at({k}) - y.at({k}) * gs).epsilon(1e-5));
  const std::string msg = error_of([&] { softmax_backward(Tensor::zeros({4}), y); });
  CHECK(has(msg, "softmax_backward"));
  CHECK(has(msg, "(4)"));
  CHECK(has(msg, "(3)"));
}

TEST_CASE("softmax of a scalar is an error naming the op") {
  CHECK(has(error_of([] { softmax(Tensor::scalar(1)); }), "softmax"));
  CHECK(has(error_of([] { log_softmax(Tensor::scalar(1)); }), "log_softmax"));
}

TEST_CASE("softmax_rows over many rows (parallel) matches row-by-row results") {
  Generator g = test_generator();
  Tensor x = Tensor::normal({3000, 37}, 0, 4, g);
  Tensor y = softmax(x);
  for (int64_t r = 0; r < 3000; r += 499) {
    Tensor row = softmax(x.slice0(r, r + 1));
    CHECK(max_abs_diff(row, y.slice0(r, r + 1)) == 0);
  }
}

// softmax_rows works on blocks of rows (three passes over ~2048 numbers); rows
// of every length must come out as the double-precision formula, whether the
// block holds many rows, one row, or a row longer than a block, and a fully
// masked row in the middle of a block must give zeros without touching its
// neighbours.
TEST_CASE(
    "softmax_rows in blocks: short, odd and longer-than-a-block rows, masked rows mid-block") {
  Generator g = test_generator();
  for (int64_t n : {1, 3, 12, 37, 2049, 5000}) {
    const int64_t rows = std::max<int64_t>(3, 6000 / n);
    Tensor x = Tensor::normal({rows, n}, 0, 5, g);
    real* px = x.data();
    // Row 1 fully masked, row 2 partly masked (every other entry but the first).
    for (int64_t k = 0; k < n; ++k) px[n + k] = -kInf;
    for (int64_t k = 1; k < n; k += 2) px[2 * n + k] = -kInf;
    std::vector<real> ref_in(px, px + rows * n);
    Tensor y = x.clone();
    softmax_rows(y.data(), rows, n);
    double worst = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const real* in = ref_in.data() + r * n;
      double m = -kInf;
      for (int64_t k = 0; k < n; ++k) m = std::max<double>(m, in[k]);
      double s = 0;
      if (m != -kInf)
        for (int64_t k = 0; k < n; ++k) s += std::exp(double(in[k]) - m);
      for (int64_t k = 0; k < n; ++k) {
        const double expect = m == -kInf ? 0.0 : std::exp(double(in[k]) - m) / s;
        const real got = y.data()[r * n + k];
        REQUIRE_FALSE(std::isnan(got));
        // Relative. In float32, x - max is rounded (6e-8 relative, so up to
        // ~2.4e-6 absolute for |x - max| ~ 40 here, which exp turns into that
        // much relative error) and the
        // row sum adds n rounded terms, an error that grows with n when the
        // sum is not vectorised (the sanitizer build): 1e-5 per 1000 numbers
        // of row (measured: 2-4e-6 vectorised, 1.2e-5 serial at n = 5000). A
        // row mixed up with its neighbour or a mask lost would be wrong by
        // order 1.
        worst = std::max(worst, std::fabs(got - expect) / std::max(expect, 1e-30));
      }
    }
    INFO("row length " << n << ", " << rows << " rows");
    CHECK(worst < 1e-5 * std::max<double>(1, n / 1000.0));
    for (int64_t k = 0; k < n; ++k) CHECK(y.data()[n + k] == 0);
  }
}
