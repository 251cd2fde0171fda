// SwiGLU in float64: the fused backward against finite differences for x and
// the three weights, and the fused block against the same maths composed from
// primitive ops (matmul, sigmoid, mul), outputs and every gradient.
#include <doctest/doctest.h>

#include "autograd/qkv_autograd.h"
#include "fused_vs_composed.h"
#include "nn/swiglu.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::test_generator;

namespace {

Var fused_swiglu(const std::vector<Var>& v) { return nn::swiglu(v[0], v[1], v[2], v[3]); }

// y = (silu(x Wg^T) * (x Wu^T)) Wd^T with silu(a) = a * sigmoid(a).
Var composed_swiglu(const std::vector<Var>& v) {
  Var a = matmul(v[0], v[1], false, true);  // (..., F)
  Var u = matmul(v[0], v[2], false, true);  // (..., F)
  return matmul(a * sigmoid(a) * u, v[3], false, true);
}

// {x (B, T, D), Wg (F, D), Wu (F, D), Wd (D, F)}, entries large enough that
// the sigmoid is used away from its middle too.
std::vector<Var> make_swiglu_inputs(int64_t B, int64_t T, int64_t D, int64_t F, Generator& g) {
  Var x(Tensor::normal({B, T, D}, 0, 1, g), true);
  Var wg(Tensor::normal({F, D}, 0, 0.8, g), true), wu(Tensor::normal({F, D}, 0, 0.8, g), true);
  Var wd(Tensor::normal({D, F}, 0, 0.5, g), true);
  x.set_name("x");
  wg.set_name("w_gate");
  wu.set_name("w_up");
  wd.set_name("w_down");
  return {x, wg, wu, wd};
}

}  // namespace

TEST_CASE("swiglu backward matches finite differences for x and the three weights") {
  Generator g = test_generator();
  auto in = make_swiglu_inputs(2, 3, 4, 6, g);
  auto r = gradcheck(fused_swiglu, in);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 2 * 3 * 4 + 3 * 6 * 4);
}

TEST_CASE("swiglu gives only the requested gradients (x alone; weights alone)") {
  Generator g = test_generator();
  auto in = make_swiglu_inputs(1, 4, 3, 5, g);
  for (int k = 1; k < 4; ++k) in[k].requires_grad_(false);
  auto r = gradcheck(fused_swiglu, in);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 12);
  in[0].requires_grad_(false);
  for (int k = 1; k < 4; ++k) in[k].requires_grad_(true);
  r = gradcheck(fused_swiglu, in);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 3 * 5 * 3);
}

TEST_CASE("swiglu fused equals SwiGLU composed from primitive ops (matmul, sigmoid, mul)") {
  Generator g = test_generator();
  testing::check_fused_equals_composed(fused_swiglu, composed_swiglu,
                                       make_swiglu_inputs(3, 5, 8, 16, g));
}

TEST_CASE("swiglu fused equals composed on enough rows for 2 threads") {
  const int prev = get_num_threads();
  set_num_threads(2);
  Generator g = test_generator();
  testing::check_fused_equals_composed(fused_swiglu, composed_swiglu,
                                       make_swiglu_inputs(4, 500, 8, 24, g));
  set_num_threads(prev);
}
