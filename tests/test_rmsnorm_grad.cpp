// RMSNorm in float64: the fused backward against finite differences, the
// fused layer against RMSNorm composed from primitive ops (mean, mul, pow),
// outputs and every gradient, the Post-LN fusion add_rms_norm, and the
// custom-op example (examples/custom_op.h), which writes the same op outside
// the library: both must give the same numbers.
#include <doctest/doctest.h>

#include <string>

#include "autograd/qkv_autograd.h"
#include "errors.h"
#include "examples/custom_op.h"
#include "fused_vs_composed.h"
#include "nn/rmsnorm.h"
#include "outer_region.h"
#include "outer_region_check.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::test_generator;

namespace {

constexpr real kRmsEps = 1e-6;

Var fused_rms(const std::vector<Var>& v) { return nn::rms_norm(v[0], v[1], kRmsEps); }

// y = x / sqrt(mean(x^2) + eps) * gamma, over the last dim.
Var composed_rms(const std::vector<Var>& v) {
  Var ms = mean(v[0] * v[0], -1, true);          // (..., 1)
  return v[0] * pow(ms + kRmsEps, -0.5) * v[1];  // (..., D)
}

// {x (xs) + offset, gamma (D)}.
std::vector<Var> make_rms_inputs(const Shape& xs, Generator& g, real offset = 0) {
  Var x(add(Tensor::normal(xs, 0, 1, g), offset), true);
  Var gamma(Tensor::normal({xs.back()}, 1, 0.5, g), true);
  x.set_name("x");
  gamma.set_name("gamma");
  return {x, gamma};
}

}  // namespace

TEST_CASE("rms_norm backward matches finite differences for x and gamma on a 3-D input") {
  Generator g = test_generator();
  auto in = make_rms_inputs({2, 3, 5}, g);
  auto r = gradcheck(fused_rms, in);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 2 * 3 * 5 + 5);
}

// A row with a large mean: LayerNorm would remove it, RMSNorm keeps it, and
// the gradient's "- mean(dxhat)" term is absent (the test fails with it).
TEST_CASE("rms_norm backward matches finite differences on one row with a non-zero mean") {
  Generator g = test_generator();
  auto in = make_rms_inputs({1, 7}, g, 3);
  auto r = gradcheck(fused_rms, in);
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("rms_norm gives only the requested gradients when just x requires grad") {
  Generator g = test_generator();
  auto in = make_rms_inputs({4, 6}, g);
  in[1].requires_grad_(false);
  auto r = gradcheck(fused_rms, in);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 24);
  CHECK_FALSE(in[1].grad().defined());
}

TEST_CASE("rms_norm fused equals RMSNorm composed from primitive ops (3-D input)") {
  Generator g = test_generator();
  testing::check_fused_equals_composed(fused_rms, composed_rms, make_rms_inputs({3, 4, 8}, g));
}

TEST_CASE("rms_norm fused equals composed when backward splits rows over 2 threads") {
  const int prev = get_num_threads();
  set_num_threads(2);
  Generator g = test_generator();
  testing::check_fused_equals_composed(fused_rms, composed_rms, make_rms_inputs({2, 2500, 8}, g));
  auto in = make_rms_inputs({5000, 8}, g);
  in[1].requires_grad_(false);
  testing::check_fused_equals_composed(fused_rms, composed_rms, in);
  set_num_threads(prev);
}

TEST_CASE("rms_norm backward inside an outer parallel region gives the serial gradients") {
  const int prev = get_num_threads();
  Generator g = test_generator();
  const Tensor x0 = Tensor::normal({5000, 8}, 0, 1, g), up = Tensor::normal({5000, 8}, 0, 1, g);
  const Tensor g0 = Tensor::normal({8}, 1, 0.5, g);
  auto grads = [&] {
    Var x(x0.clone(), true), gamma(g0.clone(), true);
    nn::rms_norm(x, gamma, kRmsEps).backward(up);
    return std::vector<Tensor>{x.grad(), gamma.grad()};
  };
  set_num_threads(1);
  const std::vector<Tensor> serial = grads();
  set_num_threads(2);
  testing::check_each_thread_matches(testing::on_each_thread_of_outer_region(grads), serial,
                                     1e-300);  // bit for bit
  set_num_threads(prev);
}

TEST_CASE("add_rms_norm matches finite differences and equals add then rms_norm") {
  Generator g = test_generator();
  auto in = make_rms_inputs({2, 3, 8}, g);
  Var b(Tensor::normal({2, 3, 8}, 0, 1, g), true);
  b.set_name("b");
  in.insert(in.begin() + 1, b);  // (a, b, gamma)
  auto fused = [](const std::vector<Var>& v) {
    return nn::add_rms_norm(v[0], v[1], v[2], kRmsEps);
  };
  auto composed = [](const std::vector<Var>& v) { return composed_rms({v[0] + v[1], v[2]}); };
  auto r = gradcheck(fused, in);
  INFO(r.report);
  CHECK(r.ok);
  testing::check_fused_equals_composed(fused, composed, in);
  // Only b requiring grad: a gets none, b gets dx.
  in[0].requires_grad_(false);
  in[2].requires_grad_(false);
  r = gradcheck(fused, in);
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("RMSNorm module: weight ones, no bias, forward equals rms_norm with it") {
  nn::RMSNorm norm(6);
  auto named = norm.named_parameters();
  REQUIRE(named.size() == 1);
  CHECK(named[0].first == "weight");
  CHECK(allclose(norm.weight.data(), Tensor::ones({6})));
  Generator g = test_generator();
  Var x(Tensor::normal({2, 6}, 0, 1, g), true);
  auto r = gradcheck([&](const std::vector<Var>& v) { return norm(v[0]); }, {x, norm.weight});
  INFO(r.report);
  CHECK(r.ok);
}

// One name per concept: the custom-op example (examples/custom_op.h) is the
// same RMSNorm written outside the library; it must agree with nn's.
TEST_CASE("the custom-op example's rms_norm equals nn::rms_norm: output and both gradients") {
  Generator g = test_generator();
  testing::check_fused_equals_composed(
      fused_rms, [](const std::vector<Var>& v) { return custom::rms_norm(v[0], v[1], kRmsEps); },
      make_rms_inputs({3, 4, 8}, g));
}
