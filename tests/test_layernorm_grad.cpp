// LayerNorm in float64: the fused backward against finite differences, and
// the fused layer against LayerNorm composed from primitive ops
// (mean, sub, mul, sqrt, div, add), outputs and every gradient.
#include <doctest/doctest.h>

#include <string>
#include "errors.h"
#include "autograd/qkv_autograd.h"
#include "fused_vs_composed.h"
#include "nn/layernorm.h"
#include "outer_region.h"
#include "outer_region_check.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::test_generator;

namespace {

Var fused_ln(const std::vector<Var>& v) { return nn::layer_norm(v[0], v[1], v[2], 1e-5); }

// y = (x - mean) / sqrt(var + eps) * gamma + beta, var biased, over the last dim.
Var composed_ln(const std::vector<Var>& v) {
  Var mu = mean(v[0], -1, true);           // (..., 1)
  Var xc = v[0] - mu;                      // (..., D)
  Var var = mean(xc * xc, -1, true);       // (..., 1)
  Var xhat = xc / sqrt(var + real(1e-5));  // (..., D)
  return xhat * v[1] + v[2];
}

// {x (xs) + offset, gamma (D), beta (D)}. test_custom_op_grad.cpp draws its
// RMSNorm inputs the same way on purpose (a user's op written like this one,
// checked like this one); each file keeps its own so it reads on its own.
std::vector<Var> make_ln_inputs(const Shape& xs, Generator& g, real offset = 0) {
  const int64_t D = xs.back();
  Var x(add(Tensor::normal(xs, 0, 1, g), offset), true);
  Var gamma(Tensor::normal({D}, 1, 0.5, g), true);
  Var beta(Tensor::normal({D}, 0, 0.5, g), true);
  x.set_name("x");
  gamma.set_name("gamma");
  beta.set_name("beta");
  return {x, gamma, beta};
}

}  // namespace

TEST_CASE("layer_norm backward matches finite differences for x, gamma and beta on a 3-D input") {
  Generator g = test_generator();
  auto in = make_ln_inputs({2, 3, 5}, g);
  auto r = gradcheck(fused_ln, in);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 2 * 3 * 5 + 5 + 5);
}

TEST_CASE("layer_norm backward matches finite differences on a 2-D input with one row") {
  Generator g = test_generator();
  auto in = make_ln_inputs({1, 7}, g);
  auto r = gradcheck(fused_ln, in);
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("layer_norm gives only the requested gradients when just x requires grad") {
  Generator g = test_generator();
  auto in = make_ln_inputs({4, 6}, g);
  in[1].requires_grad_(false);
  in[2].requires_grad_(false);
  auto r = gradcheck(fused_ln, in);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 24);
  CHECK_FALSE(in[1].grad().defined());
}

TEST_CASE("layer_norm fused equals layer norm composed from primitive ops (3-D input)") {
  Generator g = test_generator();
  testing::check_fused_equals_composed(fused_ln, composed_ln, make_ln_inputs({3, 4, 8}, g));
}

TEST_CASE("layer_norm stays exact on rows far from zero (the one-pass variance does not cancel)") {
  Generator g = test_generator();
  // Spread ~1 around mean 1e3, then 1e7. The kernel sums in double, where an
  // unshifted E[x^2] - E[x]^2 is still good to ~1e-10 at mean 1e3 but wrong
  // by tens of percent at 1e7 (x^2 ~ 1e14 leaves the variance ~1 a digit or
  // two of double's sixteen): only the shift by the row's first element
  // passes the second case. At 1e7 the inputs themselves are spaced 1.9e-9
  // apart in double, so fused and composed agree to ~1e-8 there, not 1e-12;
  // 1e-7 bounds that, and the unshifted sums miss by 0.02-0.06 (measured).
  testing::check_fused_equals_composed(fused_ln, composed_ln, make_ln_inputs({3, 16}, g, 1000),
                                       1e-8);
  testing::check_fused_equals_composed(fused_ln, composed_ln, make_ln_inputs({3, 16}, g, 1e7),
                                       1e-7);
}

TEST_CASE("LayerNorm module: weight ones, bias zeros, forward equals layer_norm with them") {
  nn::LayerNorm ln(6);
  auto named = ln.named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "weight");
  CHECK(named[1].first == "bias");
  CHECK(allclose(ln.weight.data(), Tensor::ones({6})));
  CHECK(allclose(ln.bias.data(), Tensor::zeros({6})));
  Generator g = test_generator();
  Var x(Tensor::normal({2, 6}, 0, 1, g), true);
  auto r = gradcheck([&](const std::vector<Var>& v) { return ln(v[0]); }, {x, ln.weight, ln.bias});
  INFO(r.report);
  CHECK(r.ok);
}

// Enough rows (5000 of D = 8) for the backward to split over 2 threads, each
// summing its rows' dgamma and dbeta into its own row of scratch; once with
// beta not requiring grad, so only dgamma is summed.
TEST_CASE("layer_norm fused equals composed when backward splits rows over 2 threads") {
  const int prev = get_num_threads();
  set_num_threads(2);
  Generator g = test_generator();
  testing::check_fused_equals_composed(fused_ln, composed_ln, make_ln_inputs({2, 2500, 8}, g));
  auto in = make_ln_inputs({5000, 8}, g);
  in[2].requires_grad_(false);
  testing::check_fused_equals_composed(fused_ln, composed_ln, in);
  set_num_threads(prev);
}

// Called from inside someone else's parallel region, backward runs on the
// calling thread with one scratch row, and gives the same gradients.
TEST_CASE("layer_norm backward inside an outer parallel region gives the serial gradients") {
  const int prev = get_num_threads();
  set_num_threads(2);
  Generator g = test_generator();
  const Tensor x0 = Tensor::normal({5000, 8}, 0, 1, g), up = Tensor::normal({5000, 8}, 0, 1, g);
  const Tensor g0 = Tensor::normal({8}, 1, 0.5, g), b0 = Tensor::normal({8}, 0, 0.5, g);
  auto grads = [&] {
    Var x(x0.clone(), true), gamma(g0.clone(), true), beta(b0.clone(), true);
    nn::layer_norm(x, gamma, beta, 1e-5).backward(up);
    return std::vector<Tensor>{x.grad(), gamma.grad(), beta.grad()};
  };
  // The serial reference runs on one thread, as each thread of the region
  // does, so the two agree bit for bit. (On two threads it adds up gamma's and
  // beta's gradients in another order: rounding, which took some seeds past
  // 1e-12.)
  set_num_threads(1);
  const std::vector<Tensor> serial = grads();
  set_num_threads(2);
  testing::check_each_thread_matches(testing::on_each_thread_of_outer_region(grads), serial,
                                     1e-300);  // bit for bit
  set_num_threads(prev);
}

// add_layer_norm(a, b) = layer_norm(a + b), the Post-LN residual with the sum
// made inside the norm's row pass: finite differences for both addends, gamma
// and beta, and equality with the composed add + layer_norm.
TEST_CASE("add_layer_norm matches finite differences and equals add then layer_norm") {
  Generator g = test_generator();
  auto in = make_ln_inputs({2, 3, 8}, g);
  Var b(Tensor::normal({2, 3, 8}, 0, 1, g), true);
  b.set_name("b");
  in.insert(in.begin() + 1, b);  // (a, b, gamma, beta)
  auto fused = [](const std::vector<Var>& v) {
    return nn::add_layer_norm(v[0], v[1], v[2], v[3], 1e-5);
  };
  auto composed = [](const std::vector<Var>& v) { return composed_ln({v[0] + v[1], v[2], v[3]}); };
  auto r = gradcheck(fused, in);
  INFO(r.report);
  CHECK(r.ok);
  testing::check_fused_equals_composed(fused, composed, in);
  // Only b requiring grad: a gets none, b gets dx.
  in[0].requires_grad_(false);
  in[2].requires_grad_(false);
  in[3].requires_grad_(false);
  r = gradcheck(fused, in);
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("add_layer_norm rejects addends of different shapes, naming the op and both shapes") {
  Generator g = test_generator();
  Var a(Tensor::normal({2, 4}, 0, 1, g)), b(Tensor::normal({2, 3}, 0, 1, g));
  Var gamma(Tensor::ones({4})), beta(Tensor::zeros({4}));
  const std::string msg = testing::error_of([&] { nn::add_layer_norm(a, b, gamma, beta); });
  CHECK(testing::has(msg, "add_layer_norm"));
  CHECK(testing::has(msg, "(2,4)"));
  CHECK(testing::has(msg, "(2,3)"));
}
