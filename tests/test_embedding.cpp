// Embedding in float32: its initialisation and lookup, and the errors it
// raises. The float64 gradient checks are in test_embedding_grad.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "errors.h"
#include "nn/embedding.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::check_error;
using qkv::testing::test_generator;

TEST_CASE("embedding rejects an out-of-range or negative id, naming the id, its position and V") {
  Generator g = test_generator();
  nn::Embedding emb(10, 4, g);
  check_error([&] { emb({1, 2, 3, 10}, {2, 2}); }, {"embedding", "id 10", "position 3", "V = 10"});
  check_error([&] { emb({1, -2, 3, 4}, {2, 2}); }, {"embedding", "id -2", "position 1", "V = 10"});
  check_error([&] { emb({1, 2, 3}, {2, 2}); }, {"embedding", "3 ids", "(2,2)"});
  check_error([] { nn::Embedding bad(0, 4); }, {"Embedding", "V 0"});
}

TEST_CASE(
    "Embedding: weight (V, D) drawn N(0, 1) like nn.Embedding; forward gives (B, T, D) rows") {
  Generator g = test_generator();
  nn::Embedding emb(1000, 16, g);
  REQUIRE(emb.weight.shape() == Shape{1000, 16});
  CHECK(emb.named_parameters()[0].first == "weight");
  double s = 0, s2 = 0;
  for (real v : emb.weight.data().to_vector()) {
    s += v;
    s2 += double(v) * v;
  }
  const double n = 16000, m = s / n, sd = std::sqrt(s2 / n - m * m);
  CHECK(std::abs(m) < 0.03);       // sd of the mean ~0.008
  CHECK(std::abs(sd - 1) < 0.03);  // sd of the sd ~0.006
  Var y = emb({7, 0, 999, 7, 3, 5}, {2, 3});
  REQUIRE(y.shape() == Shape{2, 3, 16});
  for (int64_t j = 0; j < 16; ++j) {
    CHECK(y.data().at({0, 2, j}) == emb.weight.data().at({999, j}));
    CHECK(y.data().at({1, 0, j}) == emb.weight.data().at({7, j}));
  }
}
