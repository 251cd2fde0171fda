// FeedForward in float32: parity with PyTorch (fixtures ffn_relu and ffn_gelu
// in tests/fixtures/layers.safetensors) and the errors it raises. The float64
// gradient checks and the fused-vs-composed tests are in
// test_feedforward_grad.cpp.
#include <doctest/doctest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "errors.h"
#include "fixture.h"
#include "nn/feedforward.h"

using namespace qkv;

using qkv::testing::check_close;
using qkv::testing::check_error;

namespace {

void ffn_fixture_case(const std::string& c, nn::Activation act) {
  TensorFile f = load_fixture("layers.safetensors");
  nn::FeedForward ffn(8, 16, act);
  load_params(ffn, f, c + ".");
  Var x(f.get(c + ".in.x").clone(), true);
  Var y = ffn(x);
  check_close(y.data(), f.get(c + ".out.y"), c + " out.y");
  y.backward(f.get(c + ".in.upstream"));  // loss = sum(y * upstream)
  check_close(x.grad(), f.get(c + ".grad.x"), c + " grad.x");
  qkv::testing::check_param_grads(ffn.named_parameters(), f, c + ".grad.", c);
}

}  // namespace

TEST_CASE("FeedForward (ReLU) matches PyTorch: output and every gradient (fixture ffn_relu)") {
  ffn_fixture_case("ffn_relu", nn::Activation::ReLU);
}

TEST_CASE(
    "FeedForward (exact GELU) matches PyTorch: output and every gradient (fixture ffn_gelu)") {
  ffn_fixture_case("ffn_gelu", nn::Activation::GELU);
}

TEST_CASE("feed_forward rejects mismatched input, weight and bias shapes, naming them") {
  nn::FeedForward ffn(4, 6);
  check_error([&] { ffn(Var(Tensor::zeros({2, 5}))); }, {"feed_forward", "(2,5)", "(6,4)"});
  Var x(Tensor::zeros({2, 4}));
  check_error(
      [&] {
        nn::feed_forward(x, ffn.linear1->weight, ffn.linear1->bias, Var(Tensor::zeros({4, 5})),
                         ffn.linear2->bias);
      },
      {"feed_forward", "(4,5)"});
  check_error(
      [&] {
        nn::feed_forward(x, ffn.linear1->weight, Var(Tensor::zeros({4})), ffn.linear2->weight,
                         ffn.linear2->bias);
      },
      {"feed_forward", "b1", "(4)"});
  check_error([] { nn::FeedForward bad(4, 0); }, {"FeedForward", "F 0"});
  // one bias without the other is neither form of the op
  check_error(
      [&] {
        nn::feed_forward(x, ffn.linear1->weight, ffn.linear1->bias, ffn.linear2->weight, Var());
      },
      {"feed_forward", "b2 undefined", "or both undefined"});
  // SwiGLU is a block of its own, not an activation of this op or module
  check_error(
      [&] {
        nn::feed_forward(x, ffn.linear1->weight, Var(), ffn.linear2->weight, Var(),
                         nn::Activation::SwiGLU);
      },
      {"feed_forward", "swiglu", "nn::swiglu"});
  check_error([] { nn::FeedForward bad(4, 8, nn::Activation::SwiGLU); },
              {"FeedForward", "swiglu", "nn::make_ffn"});
}

TEST_CASE(
    "feed_forward on the worked example of docs/feedforward-backward.md: y and every gradient by "
    "hand") {
  auto var = [](std::initializer_list<real> v, Shape s) {
    return Var(Tensor::from_vector(std::vector<real>(v), s), true);
  };
  Var x = var({1, 2}, {1, 2});
  Var w1 = var({1, 0, 0, 1, 1, -1}, {3, 2}), b1 = var({0, -3, 0.5}, {3});
  Var w2 = var({1, 2, 3, -1, 0, 1}, {2, 3}), b2 = var({0, 0}, {2});
  Var y = nn::feed_forward(x, w1, b1, w2, b2, nn::Activation::ReLU);
  // pre = [1, -1, -0.5], h = [1, 0, 0], y = [1, -1]
  CHECK(y.data().to_vector() == std::vector<real>{1, -1});
  y.backward(Tensor::from_vector({2, 1}, {1, 2}));                      // dy = [2, 1]
  CHECK(w2.grad().to_vector() == std::vector<real>{2, 0, 0, 1, 0, 0});  // dy^T h
  CHECK(b2.grad().to_vector() == std::vector<real>{2, 1});
  // dh = [1, 4, 7]; only unit 1 is on, so dpre = [1, 0, 0]
  CHECK(w1.grad().to_vector() == std::vector<real>{1, 2, 0, 0, 0, 0});  // dpre^T x
  CHECK(b1.grad().to_vector() == std::vector<real>{1, 0, 0});
  CHECK(x.grad().to_vector() == std::vector<real>{1, 0});  // dpre W1
}
