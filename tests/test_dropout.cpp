// Dropout: the fraction dropped, the scaling that keeps the mean, the mask
// reproduced by the seed, the module's train/eval switch, and bad p.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "errors.h"
#include "nn/dropout.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::check_error;
using qkv::testing::test_generator;
using qkv::testing::test_seed;

TEST_CASE("dropout rejects p outside [0, 1), naming p") {
  Var x(Tensor::ones({4}));
  Generator g = test_generator();
  check_error([&] { nn::dropout(x, 1, g); }, {"dropout", "p must be in [0, 1)", "1"});
  check_error([&] { nn::dropout(x, -0.1, g); }, {"dropout", "-0.1"});
  check_error([&] { nn::Dropout bad(1.5, g); }, {"Dropout", "1.5"});
  check_error([&] { nn::dropout(x, std::nan(""), g); }, {"dropout", "nan"});
}

TEST_CASE("dropout zeroes a fraction near p of 100k elements and preserves the mean") {
  const int64_t n = 100000;
  const real p = 0.3;
  Generator g = test_generator();
  Var x(Tensor::ones({n}), true);
  Var y = nn::dropout(x, p, g);
  int64_t zeros = 0, kept_exact = 0;
  double total = 0;
  const real keep = 1 / (1 - p);
  for (real v : y.data().to_vector()) {
    zeros += v == 0;
    kept_exact += v == keep;
    total += v;
  }
  CHECK(zeros + kept_exact == n);  // every element is 0 or 1 / (1 - p)
  // binomial: sd of the fraction is sqrt(p (1 - p) / n) ~ 0.0014; 0.01 is 7 sd
  CHECK(std::abs(static_cast<double>(zeros) / n - p) < 0.01);
  CHECK(std::abs(total / n - 1.0) < 0.02);  // inverted dropout keeps E[y] = x
  // backward multiplies by the same mask: dx = dy * mask = y for x = 1, dy = 1
  y.backward(Tensor::ones({n}));
  CHECK(max_abs_diff(x.grad(), y.data()) == 0);
}

TEST_CASE("dropout: the same generator seed gives the same mask, another seed a different one") {
  Tensor base = Tensor::ones({1000});
  // The same seed twice, and the seed next to it (splitmix64 makes neighbours unrelated).
  const uint64_t seed = test_seed();
  Generator g1(seed), g2(seed), g3(seed + 1);
  Tensor a = nn::dropout(Var(base), 0.5, g1).data();
  Tensor b = nn::dropout(Var(base), 0.5, g2).data();
  Tensor c = nn::dropout(Var(base), 0.5, g3).data();
  CHECK(max_abs_diff(a, b) == 0);
  CHECK(max_abs_diff(a, c) > 0);
  // the stream moves on: a second call from g1 draws a new mask
  CHECK(max_abs_diff(nn::dropout(Var(base), 0.5, g1).data(), a) > 0);
}

TEST_CASE("Dropout module drops in training and is the identity in eval and with p = 0") {
  Generator g = test_generator();
  nn::Dropout drop(0.5, g);
  Var x(Tensor::ones({2000}), true);
  CHECK(drop.is_training());
  CHECK(max_abs_diff(drop(x).data(), x.data()) > 0);
  drop.eval();
  Var y = drop(x);
  CHECK(y.same_as(x));
  drop.train();
  nn::Dropout none(0, g);
  CHECK(none(x).same_as(x));
}
