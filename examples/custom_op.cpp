// custom_op: write your own differentiable op and train with it.
//
//   build/rel-f32/custom_op
//
// The op, RMSNorm, lives in examples/custom_op.h: its maths, a forward and a
// backward kernel, its Node and the function users call. This program
//   1. checks its hand-written backward against finite differences
//      (gradcheck; loose in this float32 build, tight in the float64 test
//      tests/test_custom_op_grad.cpp),
//   2. shows that bad shapes are refused with a qkv::Error,
//   3. trains a small network that uses it (Linear -> RMSNorm -> ReLU ->
//      Linear) to fit a fixed random target, printing the falling loss.
// It uses only the public headers, as any program built against qkv can.
#include <cstdio>
#include <iostream>
#include <memory>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "examples/custom_op.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "optim/adam.h"

using namespace qkv;

namespace {

// A module that uses the new op like any built-in one: its gamma is an
// ordinary parameter, so the optimizer updates it from the gradient our
// backward computes.
class Net : public nn::Module {
 public:
  Net(int64_t in, int64_t hidden, Generator& g)
      : fc1(register_module("fc1", std::make_shared<nn::Linear>(in, hidden, true, g))),
        fc2(register_module("fc2", std::make_shared<nn::Linear>(hidden, 1, true, g))),
        gamma(register_parameter("norm.gamma", Tensor::ones({hidden}))) {}

  Var forward(const Var& x) const {                    // x (B, in)
    Var h = custom::rms_norm(fc1->forward(x), gamma);  // (B, hidden)
    return fc2->forward(relu(h));                      // (B, 1)
  }

  std::shared_ptr<nn::Linear> fc1, fc2;
  nn::Parameter gamma;  // (hidden)
};

}  // namespace

// Any fixed value: the numbers this example prints are the same every run.
constexpr uint64_t kExampleSeed = 7;

int main() {
  Generator g(kExampleSeed);

  // ---- 1. gradcheck: analytic backward vs central differences ----
  Var x(Tensor::normal({2, 3, 4}, 0, 1, g), /*requires_grad=*/true);  // (2, 3, D=4)
  Var gamma(Tensor::normal({4}, 1, 0.5, g), true);                    // (D)
  GradcheckResult r =
      gradcheck([](const std::vector<Var>& v) { return custom::rms_norm(v[0], v[1]); }, {x, gamma});
  std::cout << "1. gradcheck of rms_norm (" << real_name << "): " << r << "\n";

  // ---- 2. the op checks its inputs ----
  try {
    custom::rms_norm(x, Var(Tensor::ones({5})));
    std::cout << "2. expected an error\n";
    return 1;
  } catch (const Error& e) {
    std::cout << "2. a bad call throws: " << e.what() << "\n";
  }

  // ---- 3. train a model that uses it ----
  // Target: y = tanh(x . w*) for a fixed random w*, on 256 fixed inputs.
  const int64_t B = 256, in = 8, hidden = 32;
  const Tensor X = Tensor::normal({B, in}, 0, 1, g);         // (B, in)
  const Tensor w_star = Tensor::normal({in, 1}, 0, 0.5, g);  // (in, 1)
  const Var inputs(X);                                       // (B, in), no grad
  const Var targets(tanh(matmul(X, w_star)));                // (B, 1), no grad

  Net net(in, hidden, g);
  optim::Adam opt(net.parameters(), /*lr=*/real(1e-2));
  std::cout << "3. training Linear(" << in << ", " << hidden << ") -> rms_norm -> relu -> Linear("
            << hidden << ", 1), " << net.num_parameters() << " parameters, full batch of " << B
            << "\n";
  real first = 0, last = 0;
  const int steps = 200;
  for (int step = 0; step <= steps; ++step) {
    Var diff = net.forward(inputs) - targets;  // (B, 1)
    Var loss = mean(diff * diff);              // mean squared error
    if (step == 0) first = loss.item();
    last = loss.item();
    if (step % 25 == 0) std::printf("   step %3d  loss %.5f\n", step, static_cast<double>(last));
    if (step == steps) break;
    opt.zero_grad();
    loss.backward();  // runs RMSNormNode::backward along with the library's nodes
    opt.step();
  }
  std::printf("   loss %.5f -> %.5f (%.1fx lower)\n", static_cast<double>(first),
              static_cast<double>(last), static_cast<double>(first / last));
  return r.ok && last < first ? 0 : 1;
}
