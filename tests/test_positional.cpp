// Positional encodings: the sinusoidal table against the paper's formula, how
// both encodings add to x and pass the gradient, and their shape errors.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "errors.h"
#include "nn/positional.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::check_error;
using qkv::testing::test_generator;

TEST_CASE("LearnedPositionalEmbedding rejects T > max_len, naming T and max_positions") {
  Generator g = test_generator();
  nn::LearnedPositionalEmbedding pos(5, 4, g);
  check_error([&] { pos(Var(Tensor::zeros({2, 7, 4}))); }, {"T = 7", "max_positions = 5"});
  check_error(
      [&] {
        pos(Var(Tensor::zeros({2, 3, 6})));
      },
      {"LearnedPositionalEmbedding", "(2,3,6)"});
}

TEST_CASE("SinusoidalPositionalEncoding rejects an input whose last dim is not D") {
  nn::SinusoidalPositionalEncoding pe(8);
  check_error(
      [&] {
        pe(Var(Tensor::zeros({2, 3, 6})));
      },
      {"SinusoidalPositionalEncoding", "(2,3,6)", "D = 8"});
  check_error(
      [&] {
        nn::add_positions(Var(Tensor::zeros({2, 6, 4})), Var(Tensor::zeros({5, 4})));
      },
      {"add_positions", "(2,6,4)", "(5,4)"});
}

TEST_CASE(
    "sinusoidal table: PE(0) = [0,1,0,1,...], PE(1,0) = sin(1), PE(1,1) = cos(1), PE(pos,2i) "
    "formula") {
  const int64_t D = 16;
  nn::SinusoidalPositionalEncoding pe(D, 32);
  Tensor t = pe.table(32);
  REQUIRE(t.shape() == Shape{32, D});
  for (int64_t j = 0; j < D; ++j) CHECK(t.at({0, j}) == (j % 2 == 0 ? 0 : 1));
  CHECK(t.at({1, 0}) == doctest::Approx(std::sin(1.0)).epsilon(1e-7));
  CHECK(t.at({1, 1}) == doctest::Approx(std::cos(1.0)).epsilon(1e-7));
  // pos 7, i = 3: angle 7 / 10000^(6/16)
  const double angle = 7 / std::pow(10000.0, 6.0 / 16);
  CHECK(t.at({7, 6}) == doctest::Approx(std::sin(angle)).epsilon(1e-7));
  CHECK(t.at({7, 7}) == doctest::Approx(std::cos(angle)).epsilon(1e-7));
  // the last pair has the lowest frequency 1 / 10000^(14/16)
  const double slow = 31 / std::pow(10000.0, 14.0 / 16);
  CHECK(t.at({31, 14}) == doctest::Approx(std::sin(slow)).epsilon(1e-7));
}

TEST_CASE(
    "SinusoidalPositionalEncoding adds PE[:T] to every batch row, gradient passes to x unchanged") {
  nn::SinusoidalPositionalEncoding pe(6, 10);
  Generator g = test_generator();
  Var x(Tensor::normal({3, 4, 6}, 0, 1, g), true);
  Var y = pe(x);
  Tensor t = pe.table(4);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t s = 0; s < 4; ++s)
      for (int64_t j = 0; j < 6; ++j)
        CHECK(y.data().at({b, s, j}) == x.data().at({b, s, j}) + t.at({s, j}));
  Tensor up = Tensor::normal({3, 4, 6}, 0, 1, g);
  y.backward(up);
  CHECK(max_abs_diff(x.grad(), up) == 0);
}

TEST_CASE("SinusoidalPositionalEncoding grows its table for a sequence longer than max_positions") {
  nn::SinusoidalPositionalEncoding pe(8, 4);
  CHECK(pe.max_positions() == 4);
  Var y = pe(Var(Tensor::zeros({1, 11, 8})));
  CHECK(pe.max_positions() >= 11);
  // row 10 of the grown table is the formula's value; rows below are unchanged
  const double a = 10 / std::pow(10000.0, 2.0 / 8);
  CHECK(y.data().at({0, 10, 2}) == doctest::Approx(std::sin(a)).epsilon(1e-7));
  CHECK(y.data().at({0, 10, 3}) == doctest::Approx(std::cos(a)).epsilon(1e-7));
  CHECK(y.data().at({0, 1, 0}) == doctest::Approx(std::sin(1.0)).epsilon(1e-7));
  nn::SinusoidalPositionalEncoding fresh(8, 11);
  CHECK(max_abs_diff(pe.table(11), fresh.table(11)) == 0);
}

TEST_CASE(
    "LearnedPositionalEmbedding adds weight[:T] and sends the batch-summed gradient to those "
    "rows") {
  Generator g = test_generator();
  nn::LearnedPositionalEmbedding pos(6, 3, g);
  REQUIRE(pos.named_parameters().size() == 1);
  CHECK(pos.named_parameters()[0].first == "weight");
  Var x(Tensor::zeros({2, 4, 3}), true);
  Var y = pos(x);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t j = 0; j < 3; ++j) CHECK(y.data().at({b, t, j}) == pos.weight.data().at({t, j}));
  y.backward(Tensor::ones({2, 4, 3}));
  for (int64_t j = 0; j < 3; ++j) {
    CHECK(pos.weight.grad().at({3, j}) == 2);  // two sequences used row 3
    CHECK(pos.weight.grad().at({4, j}) == 0);  // rows >= T unused
  }
}
