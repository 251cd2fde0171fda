#include <doctest/doctest.h>

#include "autograd/qkv_autograd.h"

using namespace qkv;

TEST_CASE("smoke: relu(x @ w) summed has the hand-computed value and gradient") {
  Var x(Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}), true);
  Var w(Tensor::from_vector({1, 0, -1, 2, 0.5, 1}, {3, 2}), true);
  Var y = sum(relu(matmul(x, w)) * real(2));
  y.backward();
  CHECK(y.item() == doctest::Approx(51));
  // dy/dx = 2 * rowsum(w) since every relu is active: [2, 2, 3] per row.
  CHECK(x.grad().at({1, 2}) == doctest::Approx(3));
}
