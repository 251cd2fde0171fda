// FeedForward in float64: the fused backward against finite differences, and
// the fused op against the same block composed from primitive ops
// (matmul, add, relu/gelu), for both activations.
#include <doctest/doctest.h>

#include "autograd/qkv_autograd.h"
#include "fused_vs_composed.h"
#include "nn/feedforward.h"
#include "outer_region.h"
#include "outer_region_check.h"
#include "test_seed.h"

using namespace qkv;
using nn::Activation;
using qkv::testing::test_generator;
using qkv::testing::test_seed;

namespace {

// {x (B,T,D), w1 (F,D), b1 (F), w2 (D,F), b2 (D)}
std::vector<Var> make_ffn_inputs(int64_t B, int64_t T, int64_t D, int64_t F, Generator& g) {
  std::vector<Var> v{
      Var(Tensor::normal({B, T, D}, 0, 1, g), true), Var(Tensor::normal({F, D}, 0, 0.5, g), true),
      Var(Tensor::normal({F}, 0, 0.5, g), true), Var(Tensor::normal({D, F}, 0, 0.5, g), true),
      Var(Tensor::normal({D}, 0, 0.5, g), true)};
  const char* names[] = {"x", "w1", "b1", "w2", "b2"};
  for (int i = 0; i < 5; ++i) v[i].set_name(names[i]);
  return v;
}

testing::VarFn fused(Activation act) {
  return [act](const std::vector<Var>& v) {
    return nn::feed_forward(v[0], v[1], v[2], v[3], v[4], act);
  };
}

testing::VarFn composed(Activation act) {
  return [act](const std::vector<Var>& v) {
    Var pre = matmul(v[0], v[1], false, true) + v[2];  // (B,T,D) x (D,F) -> (B,T,F)
    Var h = act == Activation::ReLU ? relu(pre) : gelu(pre);
    return matmul(h, v[3], false, true) + v[4];  // (B,T,F) x (F,D) -> (B,T,D)
  };
}

// gradcheck of every input, x (2,3,4), W1 (6,4), b1 (6), W2 (4,6), b2 (4).
void check_all_inputs_against_finite_differences(Activation act, uint64_t seed) {
  Generator g(seed);
  auto in = make_ffn_inputs(2, 3, 4, 6, g);
  auto r = gradcheck(fused(act), in);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 24 + 24 + 6 + 24 + 4);
}

}  // namespace

TEST_CASE("feed_forward (ReLU) backward matches finite differences for x, W1, b1, W2, b2") {
  check_all_inputs_against_finite_differences(Activation::ReLU, test_seed());
}

TEST_CASE("feed_forward (GELU) backward matches finite differences for x, W1, b1, W2, b2") {
  check_all_inputs_against_finite_differences(Activation::GELU, test_seed());
}

TEST_CASE("feed_forward with only the weights requiring grad checks out (x a constant)") {
  Generator g = test_generator();
  auto in = make_ffn_inputs(1, 5, 3, 7, g);
  in[0].requires_grad_(false);
  auto r = gradcheck(fused(Activation::GELU), in);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 21 + 7 + 21 + 3);
}

TEST_CASE("feed_forward (ReLU) fused equals relu(x W1^T + b1) W2^T + b2 composed from ops") {
  Generator g = test_generator();
  testing::check_fused_equals_composed(fused(Activation::ReLU), composed(Activation::ReLU),
                                       make_ffn_inputs(3, 4, 8, 16, g));
}

TEST_CASE("feed_forward (GELU) fused equals gelu(x W1^T + b1) W2^T + b2 composed from ops") {
  Generator g = test_generator();
  testing::check_fused_equals_composed(fused(Activation::GELU), composed(Activation::GELU),
                                       make_ffn_inputs(3, 4, 8, 16, g));
}

// Enough rows (2200 of F = 16) for backward's activation pass to split over
// 2 threads, each summing its rows of dpre into its own row of scratch for db1.
TEST_CASE(
    "feed_forward fused equals composed when backward splits rows over 2 threads (ReLU, GELU)") {
  const int prev = get_num_threads();
  set_num_threads(2);
  Generator g = test_generator();
  for (Activation act : {Activation::ReLU, Activation::GELU}) {
    CAPTURE(static_cast<int>(act));
    testing::check_fused_equals_composed(fused(act), composed(act),
                                         make_ffn_inputs(2, 1100, 4, 16, g));
  }
  set_num_threads(prev);
}

// Called from inside someone else's parallel region, backward runs on the
// calling thread with one scratch row, and gives the same gradients.
TEST_CASE("feed_forward backward inside an outer parallel region gives the serial gradients") {
  const int prev = get_num_threads();
  set_num_threads(2);
  Generator g = test_generator();
  const std::vector<Var> in0 = make_ffn_inputs(2, 1100, 4, 16, g);
  const Tensor up = Tensor::normal({2, 1100, 4}, 0, 1, g);
  auto grads = [&] {
    std::vector<Var> in;
    for (const Var& v : in0) in.emplace_back(v.data().clone(), true);
    nn::feed_forward(in[0], in[1], in[2], in[3], in[4], Activation::ReLU).backward(up);
    std::vector<Tensor> out;
    for (const Var& v : in) out.push_back(v.grad());
    return out;
  };
  // The serial reference runs on one thread, as each thread of the region
  // does, so the two agree bit for bit. (On two threads it adds up the weights'
  // and biases' gradients in another order: rounding, which could take some
  // seeds past 1e-12.)
  set_num_threads(1);
  const std::vector<Tensor> serial = grads();
  set_num_threads(2);
  testing::check_each_thread_matches(testing::on_each_thread_of_outer_region(grads), serial,
                                     1e-300);  // bit for bit
  set_num_threads(prev);
}

TEST_CASE(
    "FeedForward module: linear1/linear2 parameter names and shapes, forward is the fused op") {
  Generator g = test_generator();
  nn::FeedForward ffn(4, 10, Activation::GELU, g);
  auto named = ffn.named_parameters();
  REQUIRE(named.size() == 4);
  CHECK(named[0].first == "linear1.weight");
  CHECK(named[0].second.shape() == Shape{10, 4});
  CHECK(named[1].first == "linear1.bias");
  CHECK(named[2].first == "linear2.weight");
  CHECK(named[2].second.shape() == Shape{4, 10});
  CHECK(named[3].first == "linear2.bias");
  Var x(Tensor::normal({2, 4}, 0, 1, g), true);
  auto r = gradcheck(
      [&](const std::vector<Var>& v) { return ffn(v[0]); },
      {x, ffn.linear1->weight, ffn.linear1->bias, ffn.linear2->weight, ffn.linear2->bias});
  INFO(r.report);
  CHECK(r.ok);
}

// ---- without biases (--no-bias): feed_forward(x, w1, {}, w2, {}) --------------

namespace {
// {x, w1, w2} of make_ffn_inputs: the op's inputs without b1 and b2.
std::vector<Var> no_bias(std::vector<Var> v) { return {v[0], v[1], v[3]}; }
testing::VarFn fused_no_bias(Activation act) {
  return [act](const std::vector<Var>& v) {
    return nn::feed_forward(v[0], v[1], Var(), v[2], Var(), act);
  };
}
}  // namespace

TEST_CASE("feed_forward without biases: backward matches finite differences for x, W1, W2") {
  for (Activation act : {Activation::ReLU, Activation::GELU}) {
    Generator g = test_generator();
    auto in = no_bias(make_ffn_inputs(2, 3, 4, 6, g));
    auto r = gradcheck(fused_no_bias(act), in);
    INFO(nn::activation_name(act), " ", r.report);
    CHECK(r.ok);
    CHECK(r.checked == 24 + 24 + 24);
  }
}

TEST_CASE("feed_forward without biases fused equals act(x W1^T) W2^T composed from ops") {
  for (Activation act : {Activation::ReLU, Activation::GELU}) {
    Generator g = test_generator();
    testing::check_fused_equals_composed(
        fused_no_bias(act),
        [act](const std::vector<Var>& v) {
          Var pre = matmul(v[0], v[1], false, true);  // (B,T,D) x (D,F) -> (B,T,F)
          return matmul(act == Activation::ReLU ? relu(pre) : gelu(pre), v[2], false, true);
        },
        no_bias(make_ffn_inputs(3, 4, 8, 16, g)));
  }
}

TEST_CASE("FeedForward without biases: linear1/linear2 weights only, forward the bias-free op") {
  Generator g = test_generator();
  nn::FeedForward ffn(4, 10, Activation::ReLU, g, /*bias=*/false);
  auto named = ffn.named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "linear1.weight");
  CHECK(named[1].first == "linear2.weight");
  Var x(Tensor::normal({2, 4}, 0, 1, g), true);
  auto r = gradcheck([&](const std::vector<Var>& v) { return ffn(v[0]); },
                     {x, ffn.linear1->weight, ffn.linear2->weight});
  INFO(r.report);
  CHECK(r.ok);
}
