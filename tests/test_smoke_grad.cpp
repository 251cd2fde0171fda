#include <doctest/doctest.h>

#include "autograd/qkv_autograd.h"

using namespace qkv;

TEST_CASE("smoke gradcheck: softmax(x @ w) in float64") {
  Generator g(1);
  Var x(Tensor::normal({2, 3}, 0, 1, g), true);
  Var w(Tensor::normal({3, 4}, 0, 1, g), true);
  auto r = gradcheck([](const std::vector<Var>& v) { return softmax(matmul(v[0], v[1])); }, {x, w});
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.max_abs_err < 1e-8);
}
