// The op defined outside the library in examples/custom_op.h (RMSNorm), in
// float64: its hand-written backward against finite differences, against the
// same maths composed from primitive ops, and the parts of the op contract
// (autograd/node.h) a user's op must get right: gradients only where
// needs_grad, values saved rather than read back from the inputs, saved
// tensors released after backward, bad shapes refused.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "errors.h"
#include "examples/custom_op.h"
#include "fused_vs_composed.h"
#include "outer_region.h"
#include "outer_region_check.h"
#include "test_seed.h"

using namespace qkv;
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_generator;

namespace {

constexpr real kCustomEps = 1e-5;

Var custom_rms(const std::vector<Var>& v) { return custom::rms_norm(v[0], v[1], kCustomEps); }

// y = x / sqrt(mean(x^2) + eps) * gamma, from primitive ops.
Var composed_custom_rms(const std::vector<Var>& v) {
  Var ms = mean(v[0] * v[0], -1, true);             // (..., 1)
  return v[0] * pow(ms + kCustomEps, -0.5) * v[1];  // (..., D)
}

std::vector<Var> make_custom_inputs(const Shape& xs, Generator& g, real offset = 0) {
  Var x(add(Tensor::normal(xs, 0, 1, g), offset), true);
  Var gamma(Tensor::normal({xs.back()}, 1, 0.5, g), true);
  x.set_name("x");
  gamma.set_name("gamma");
  return {x, gamma};
}

}  // namespace

TEST_CASE("custom rms_norm backward matches finite differences for x and gamma on a 3-D input") {
  Generator g = test_generator();
  auto in = make_custom_inputs({2, 3, 5}, g);
  auto r = gradcheck(custom_rms, in);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 2 * 3 * 5 + 5);
}

TEST_CASE("custom rms_norm backward matches finite differences on one row with a non-zero mean") {
  Generator g = test_generator();
  auto in = make_custom_inputs({1, 7}, g, /*offset=*/1.5);
  auto r = gradcheck(custom_rms, in);
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("custom rms_norm returns only the gradients that are needed") {
  Generator g = test_generator();
  SUBCASE("x only") {
    auto in = make_custom_inputs({4, 6}, g);
    in[1].requires_grad_(false);
    auto r = gradcheck(custom_rms, in);
    INFO(r.report);
    CHECK(r.ok);
    CHECK(r.checked == 4 * 6);
    sum(custom_rms(in)).backward();
    CHECK(in[0].grad().defined());
    CHECK_FALSE(in[1].grad().defined());
  }
  SUBCASE("gamma only") {
    auto in = make_custom_inputs({4, 6}, g);
    in[0].requires_grad_(false);
    auto r = gradcheck(custom_rms, in);
    INFO(r.report);
    CHECK(r.ok);
    CHECK(r.checked == 6);
    sum(custom_rms(in)).backward();
    CHECK_FALSE(in[0].grad().defined());
    CHECK(in[1].grad().defined());
  }
}

TEST_CASE("custom rms_norm equals RMSNorm composed from primitive ops, outputs and gradients") {
  Generator g = test_generator();
  qkv::testing::check_fused_equals_composed(custom_rms, composed_custom_rms,
                                            make_custom_inputs({3, 4, 8}, g));
}

TEST_CASE("custom rms_norm differentiates through an intermediate input whose values were freed") {
  // x * 3 is a temporary: its last handle goes when rms_norm returns, which
  // frees its values in the graph (autograd/var.h). The node saved its own
  // reference, so backward still has them.
  Generator g = test_generator();
  auto in = make_custom_inputs({2, 5}, g);
  auto through_temp = [](const std::vector<Var>& v) { return custom_rms({v[0] * real(3), v[1]}); };
  auto composed = [](const std::vector<Var>& v) {
    return composed_custom_rms({v[0] * real(3), v[1]});
  };
  Var y = through_temp(in);
  Node* node = y.grad_fn().get();
  REQUIRE(node != nullptr);
  // The input variable is in the graph, but its values are gone.
  CHECK(has(error_of([&] { (void)node->inputs[0].data(); }), "were freed"));
  qkv::testing::check_fused_equals_composed(through_temp, composed, in);
  auto r = gradcheck(through_temp, in);
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("custom rms_norm frees its saved tensors after backward unless the graph is retained") {
  Generator g = test_generator();
  auto in = make_custom_inputs({3, 4}, g);
  Var y = custom_rms(in);
  auto* node = dynamic_cast<custom::RMSNormNode*>(y.grad_fn().get());
  REQUIRE(node != nullptr);
  const Tensor up = Tensor::ones(y.shape());

  y.backward(up, /*retain_graph=*/true);
  CHECK(node->x.defined());
  const Tensor first = in[0].grad().clone();
  y.backward(up);  // accumulates a second time, then releases
  CHECK(max_abs_diff(in[0].grad(), mul(first, real(2))) < 1e-12);
  CHECK_FALSE(node->x.defined());
  CHECK_FALSE(node->rstd.defined());
  CHECK(has(error_of([&] { y.backward(up); }), "rms_norm a second time"));
}

TEST_CASE("custom rms_norm gives the same gradients on 1 and 2 threads and in an outer region") {
  Generator g = test_generator();
  auto in = make_custom_inputs({4096, 8}, g);  // 32768 elements: the row loops go parallel
  auto grads = [&in] {
    for (Var v : in) v.clear_grad();
    custom_rms(in).backward(Tensor::full({4096, 8}, 0.25));
    std::vector<Tensor> out{in[0].grad().clone(), in[1].grad().clone()};
    for (Var v : in) v.clear_grad();
    return out;
  };
  const int threads = get_num_threads();
  set_num_threads(1);
  const auto serial = grads();
  set_num_threads(2);
  const auto two = grads();
  set_num_threads(threads);
  CHECK(max_abs_diff(two[0], serial[0]) == 0);
  CHECK(max_abs_diff(two[1], serial[1]) == 0);
  // Each thread of a user's parallel region builds and differentiates its own
  // graph of the same inputs (its own copies, so the .grad()s do not race).
  auto per_thread = qkv::testing::on_each_thread_of_outer_region([&] {
    std::vector<Var> mine{Var(in[0].data().clone(), true), Var(in[1].data().clone(), true)};
    custom_rms(mine).backward(Tensor::full({4096, 8}, 0.25));
    return std::vector<Tensor>{mine[0].grad(), mine[1].grad()};
  });
  qkv::testing::check_each_thread_matches(per_thread, serial, 1e-300);  // bit for bit
}

TEST_CASE("custom rms_norm refuses bad shapes and eps with a qkv::Error naming the op and shapes") {
  Var x(Tensor::ones({2, 3}), true);
  const std::string bad_gamma = error_of([&] { custom::rms_norm(x, Var(Tensor::ones({4}))); });
  CHECK(has(bad_gamma, "rms_norm"));
  CHECK(has(bad_gamma, "(2,3)"));
  CHECK(has(bad_gamma, "(4)"));
  CHECK(has(error_of([&] { custom::rms_norm(Var(Tensor::scalar(1)), Var(Tensor::ones({1}))); }),
            "rms_norm: input () needs a non-empty last dimension"));
  CHECK(has(error_of([&] { custom::rms_norm(x, Var(Tensor::ones({3})), 0); }),
            "rms_norm: eps must be > 0"));
}
