// The autograd engine: accumulation, requires_grad propagation, leaves and
// non-leaves, retain_grad, detach, grad mode, backward errors, freeing saved
// tensors, and very deep graphs.
#include <doctest/doctest.h>

#include "errors.h"
#include "test_seed.h"

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "autograd/qkv_autograd.h"

using namespace qkv;

namespace {
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_generator;
bool has_fn(const Var& v) { return v.grad_fn() != nullptr; }
Var leaf(std::vector<real> v, bool rg = true) { return Var(Tensor::from_vector(v), rg); }
}  // namespace

// ---- accumulation -------------------------------------------------------------

TEST_CASE("two uses of x in one graph accumulate: d(sum x*x)/dx = 2x") {
  Var x = leaf({1, -2, 3});
  sum(x * x).backward();
  CHECK(x.grad().to_vector() == std::vector<real>{2, -4, 6});
  Var y = leaf({1, 2});
  sum(y + y + y).backward();  // three uses
  CHECK(y.grad().to_vector() == std::vector<real>{3, 3});
}

TEST_CASE("a shared subexpression gets the gradient of all its users") {
  // u = 2x, z = u*u + u  =>  dz/dx = (2u + 1) * 2
  Var x = leaf({1, 3});
  Var u = x * real(2);
  Var z = sum(u * u + u);
  z.backward();
  CHECK(x.grad().to_vector() == std::vector<real>{(2 * 2 + 1) * 2, (2 * 6 + 1) * 2});
  // A diamond: a -> (b = a*3, c = exp(a)) -> d = b*c;  dd/da = 3c + b c = c (3 + 3a)
  Var a = leaf({0.5});
  Var d = sum((a * real(3)) * exp(a));
  d.backward();
  CHECK(a.grad().item() == doctest::Approx(std::exp(0.5) * (3 + 1.5)));
}

TEST_CASE("gradients accumulate across backward calls until zero_grad") {
  Var x = leaf({1, 2});
  sum(x * x).backward();
  CHECK(x.grad().to_vector() == std::vector<real>{2, 4});
  sum(x * x).backward();
  CHECK(x.grad().to_vector() == std::vector<real>{4, 8});
  const Tensor buf = x.grad();
  x.zero_grad();
  CHECK(x.grad().defined());
  CHECK(x.grad().to_vector() == std::vector<real>{0, 0});
  CHECK(x.grad().shares_storage_with(buf));  // zero_grad keeps the buffer
  sum(x * real(3)).backward();
  CHECK(x.grad().to_vector() == std::vector<real>{3, 3});
  x.clear_grad();
  CHECK_FALSE(x.grad().defined());
  x.zero_grad();  // harmless without a gradient
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("a leaf's grad is a private copy: later changes to the upstream gradient do not leak") {
  Var x(Tensor::zeros({2}), true);
  Var y = x + real(1);  // add_scalar passes the upstream gradient through untouched
  Tensor g = Tensor::from_vector({5, 6});
  y.backward(g);
  CHECK(x.grad().to_vector() == std::vector<real>{5, 6});
  CHECK_FALSE(x.grad().shares_storage_with(g));
  g.fill_(0);
  CHECK(x.grad().to_vector() == std::vector<real>{5, 6});
  // Accumulating again must not write into g either.
  Var y2 = x + real(1);
  Tensor g2 = Tensor::from_vector({1, 1});
  y2.backward(g2);
  CHECK(x.grad().to_vector() == std::vector<real>{6, 7});
  CHECK(g2.to_vector() == std::vector<real>{1, 1});
}

TEST_CASE("backward from a scalar leaf sets its grad to 1") {
  Var x(Tensor::scalar(3), true);
  x.backward();
  CHECK(x.grad().item() == 1);
}

// ---- requires_grad, leaves, grad_fn -----------------------------------------------

TEST_CASE("requires_grad propagates from any input and only then is a node recorded") {
  Var a = leaf({1, 2}, false), b = leaf({3, 4}, true), c = leaf({5, 6}, false);
  Var ab = a * b, ac = a * c;
  CHECK(ab.requires_grad());
  CHECK(has_fn(ab));
  CHECK_FALSE(ac.requires_grad());
  CHECK_FALSE(has_fn(ac));
  CHECK(ac.is_leaf());
  // Through a chain of several ops.
  Var deep = exp(sum(relu(ab) + ac, 0) * real(2));
  CHECK(deep.requires_grad());
  // Only b receives a gradient; a never does.
  sum(ab).backward();
  CHECK(b.grad().to_vector() == std::vector<real>{1, 2});
  CHECK_FALSE(a.grad().defined());
  // requires_grad_ turns tracking on for a leaf.
  a.requires_grad_();
  Var ab2 = a * b;
  sum(ab2).backward();
  CHECK(a.grad().to_vector() == std::vector<real>{3, 4});
}

TEST_CASE("leaves have no grad_fn; op results are non-leaves whose grad_fn names the op") {
  Var x = leaf({1, 2});
  CHECK(x.is_leaf());
  CHECK_FALSE(has_fn(x));
  Var y = x * x;
  CHECK_FALSE(y.is_leaf());
  REQUIRE(has_fn(y));
  CHECK(std::string(y.grad_fn()->name()) == "mul");
  CHECK(std::string(matmul(reshape(x, {1, 2}), reshape(x, {2, 1})).grad_fn()->name()) == "matmul");
  CHECK(std::string(sum(x).grad_fn()->name()) == "sum");
  CHECK(y.grad_fn()->inputs.size() == 2);
  CHECK(y.grad_fn()->inputs[0].same_as(x));
  // A non-leaf cannot stop tracking.
  CHECK(has(error_of([&] { y.requires_grad_(false); }), "requires_grad_"));
  // A leaf that does not require grad is still a leaf.
  CHECK(leaf({1}, false).is_leaf());
}

TEST_CASE("non-leaves keep no grad unless retain_grad() is called") {
  Var x = leaf({1, 2});
  Var h = x * real(3);
  Var h2 = x * real(4);
  h2.retain_grad();
  Var loss = sum(h * h2);
  loss.backward();
  CHECK_FALSE(h.grad().defined());
  REQUIRE(h2.grad().defined());
  CHECK(h2.grad().to_vector() == h.data().to_vector());      // d(h*h2)/dh2 = h
  CHECK(x.grad().to_vector() == std::vector<real>{24, 48});  // d(12 x^2)/dx = 24 x
}

TEST_CASE("detach cuts the graph: the detached branch contributes no gradient") {
  Var x = leaf({2, 3});
  Var d = (x * real(5)).detach();
  CHECK(d.is_leaf());
  CHECK_FALSE(d.requires_grad());
  CHECK_FALSE(has_fn(d));
  CHECK(d.data().to_vector() == std::vector<real>{10, 15});
  // y = d * x: with d constant, dy/dx = d (not d + 5x).
  sum(d * x).backward();
  CHECK(x.grad().to_vector() == std::vector<real>{10, 15});
  // detach shares the numbers (no copy), like PyTorch.
  CHECK(x.detach().data().shares_storage_with(x.data()));
}

// ---- grad mode --------------------------------------------------------------------

TEST_CASE("NoGradGuard records nothing and restores the previous mode, also when nested") {
  Var x = leaf({1, 2});
  CHECK(grad_enabled());
  {
    NoGradGuard g;
    CHECK_FALSE(grad_enabled());
    Var y = exp(x * x);
    CHECK_FALSE(y.requires_grad());
    CHECK_FALSE(has_fn(y));
    CHECK(y.is_leaf());
    CHECK(y.data().at({1}) == doctest::Approx(std::exp(4.0)));
    {
      NoGradGuard inner;
      CHECK_FALSE(grad_enabled());
    }
    CHECK_FALSE(grad_enabled());  // the inner guard restored "off", not "on"
    CHECK(has(error_of([&] { sum(y).backward(); }), "does not require grad"));
  }
  CHECK(grad_enabled());
  CHECK(exp(x).requires_grad());
  set_grad_enabled(false);
  { NoGradGuard g; }
  CHECK_FALSE(grad_enabled());  // restores what it found, even "off"
  set_grad_enabled(true);
}

TEST_CASE("grad mode is per thread: a guard here does not switch it off elsewhere") {
  NoGradGuard g;
  bool other = false;
  std::thread t([&] { other = grad_enabled(); });
  t.join();
  CHECK(other);
  CHECK_FALSE(grad_enabled());
}

// ---- backward errors ------------------------------------------------------------

TEST_CASE("backward() of a non-scalar without a gradient is an error naming the shape") {
  Var x(Tensor::ones({2, 3}), true);
  Var y = x * real(2);
  const std::string msg = error_of([&] { y.backward(); });
  CHECK(has(msg, "backward"));
  CHECK(has(msg, "(2,3)"));
  CHECK(has(msg, "not a scalar"));
  // With the upstream gradient it works.
  y.backward(Tensor::ones({2, 3}));
  CHECK(x.grad().to_vector() == std::vector<real>(6, 2));
  // A one-element non-scalar (1,1) is fine without a gradient.
  Var z(Tensor::ones({1, 1}), true);
  (z * real(4)).backward();
  CHECK(z.grad().item() == 4);
}

TEST_CASE("backward(grad) with the wrong shape is an error naming both shapes") {
  Var x(Tensor::ones({2, 3}), true);
  Var y = x * real(2);
  const std::string msg = error_of([&] { y.backward(Tensor::ones({3, 2})); });
  CHECK(has(msg, "backward"));
  CHECK(has(msg, "(3,2)"));
  CHECK(has(msg, "(2,3)"));
  CHECK(has(error_of([&] { y.backward(Tensor()); }), "backward"));
  CHECK_FALSE(x.grad().defined());  // nothing happened
}

TEST_CASE("a second backward through a freed graph throws; retain_graph=true allows it") {
  Var x = leaf({1, 2});
  Var y = sum(x * x);
  y.backward();
  const std::string msg = error_of([&] { y.backward(); });
  INFO(msg);
  CHECK(has(msg, "second time"));
  CHECK(has(msg, "retain_graph"));
  CHECK(has(msg, "sum"));  // the node where it stopped

  Var a = leaf({1, 2});
  Var b = sum(exp(a) * a);
  b.backward(Tensor::scalar(1), /*retain_graph=*/true);
  const std::vector<real> g1 = a.grad().to_vector();
  b.backward(Tensor::scalar(1), true);
  b.backward(Tensor::scalar(1));  // a third time, now freeing
  for (int i = 0; i < 2; ++i) CHECK(a.grad().to_vector()[i] == doctest::Approx(3 * g1[i]));
  // d(e^a a)/da = e^a (1 + a)
  CHECK(g1[1] == doctest::Approx(std::exp(2.0) * 3));
  CHECK(has(error_of([&] { b.backward(); }), "second time"));
}

TEST_CASE("backward on a Var that does not require grad is an error") {
  Var x = leaf({1, 2}, false);
  Var y = sum(x * x);
  const std::string msg = error_of([&] { y.backward(); });
  CHECK(has(msg, "backward"));
  CHECK(has(msg, "does not require grad"));
  CHECK(has(error_of([&] { x.backward(Tensor::ones({2})); }), "does not require grad"));
  CHECK(has(error_of([] { Var().backward(); }), "backward"));
}

// A node whose backward breaks the engine's contract.
struct BadCountNode : Node {
  const char* name() const override { return "bad_count"; }
  TensorList backward(const Tensor& g) override { return {g, g}; }  // one input only
};
struct BadShapeNode : Node {
  const char* name() const override { return "bad_shape"; }
  TensorList backward(const Tensor&) override { return {Tensor::zeros({7})}; }
};

TEST_CASE("the engine rejects a node that returns the wrong number or shape of gradients") {
  Var x = leaf({1, 2});
  Var y = make_result(x.data().clone(), std::make_shared<BadCountNode>(), {x});
  std::string msg = error_of([&] { y.backward(Tensor::ones({2})); });
  CHECK(has(msg, "bad_count"));
  CHECK(has(msg, "2 gradients for 1 inputs"));
  Var z = make_result(x.data().clone(), std::make_shared<BadShapeNode>(), {x});
  msg = error_of([&] { z.backward(Tensor::ones({2})); });
  CHECK(has(msg, "bad_shape"));
  CHECK(has(msg, "(7)"));
  CHECK(has(msg, "(2)"));
}

// ---- memory ---------------------------------------------------------------------

TEST_CASE("backward releases saved tensors: their storage use_count drops") {
  Var x(Tensor::from_vector({1, 2, 3}), true);
  CHECK(x.data().storage_use_count() == 1);
  Var y = x * x;  // mul saves both operands: two more references to x's storage
  CHECK(x.data().storage_use_count() == 3);
  Var e = exp(y);  // exp saves its output
  CHECK(e.data().storage_use_count() == 2);
  Var loss = sum(e);
  loss.backward();
  CHECK(x.data().storage_use_count() == 1);
  CHECK(e.data().storage_use_count() == 1);
  REQUIRE(has_fn(y));
  CHECK(y.grad_fn()->released);
  // With retain_graph the saved tensors stay.
  Var z = x * x;
  sum(z).backward(Tensor::scalar(1), true);
  CHECK(x.data().storage_use_count() == 3);
  CHECK_FALSE(z.grad_fn()->released);
}

TEST_CASE("every op with saved tensors frees them after backward") {
  Generator g = test_generator();
  Var a(Tensor::uniform({2, 3}, 0.5, 1.5, g), true);
  Var b(Tensor::uniform({3, 2}, 0.5, 1.5, g), true);
  const std::vector<Var> outs = {a * a,      a / a,      real(2) / a,    exp(a),       log(a),
                                 sqrt(a),    pow(a, 3),  relu(a),        gelu(a),      tanh(a),
                                 sigmoid(a), softmax(a), log_softmax(a), matmul(a, b), max(a, 1)};
  for (const Var& o : outs) {
    INFO(o.grad_fn()->name());
    Var o2 = o;
    o2.backward(Tensor::ones(o.shape()));
  }
  CHECK(a.data().storage_use_count() == 1);
  CHECK(b.data().storage_use_count() == 1);
  for (const Var& o : outs) {
    INFO(o.grad_fn()->name());
    CHECK(o.data().storage_use_count() == 1);  // outputs saved by exp/sqrt/tanh/... are let go
    CHECK(o.grad_fn()->released);
  }
}

TEST_CASE(
    "a deep chain of 100000 ops runs backward and is destroyed without overflowing the stack") {
  Var x(Tensor::from_vector({1, 2}), true);
  {
    Var y = x;
    for (int i = 0; i < 50000; ++i) {
      y = y * real(1);  // saves nothing but a scalar
      y = y + real(1);
    }
    Var loss = sum(y);
    CHECK(loss.item() == doctest::Approx(3 + 2 * 50000.0));
    loss.backward();
    CHECK(x.grad().to_vector() == std::vector<real>{1, 1});
    CHECK(topological_order(loss).size() == 100002);  // x, 100000 ops, sum
  }                                                   // the whole chain is freed here
  {
    // Dropped without ever running backward.
    Var y = x;
    for (int i = 0; i < 100000; ++i) y = tanh(y);
  }
  CHECK(x.data().storage_use_count() == 1);
}

TEST_CASE("dropping a 300000-op graph frees it iteratively (no recursion per op)") {
  // Recursive teardown (Var -> Node -> Var ...) overflowed an 8 MB stack near here.
  Var x(Tensor::from_vector({1}), true);
  {
    Var y = x;
    for (int i = 0; i < 300000; ++i) y = y * real(1);
  }
  {
    // Each op reads its input twice: the node holds both references to it.
    Var y = x;
    for (int i = 0; i < 100000; ++i) y = y * y;
  }
  CHECK(x.data().storage_use_count() == 1);
  // A node someone still holds keeps its input variables (and, built inside
  // a RetainValuesGuard, their values) alive; its graph goes later.
  std::shared_ptr<Node> kept;
  {
    RetainValuesGuard keep_values;
    Var y = x;
    for (int i = 0; i < 1000; ++i) y = y + real(1);
    kept = y.grad_fn();
  }
  REQUIRE(kept->inputs.size() == 1);
  CHECK(kept->inputs[0].data().item() == 1 + 999);
  kept.reset();
  CHECK(x.data().storage_use_count() == 1);
}

TEST_CASE(
    "an intermediate's values are freed with its last handle; the graph still backpropagates") {
  Var x(Tensor::from_vector({1, -2, 3}), true);
  Tensor a_values;
  Var loss;
  {
    Var a = x * real(2);  // mul_scalar saves nothing but the scalar
    a_values = a.data();
    loss = sum(a + real(1));  // add_scalar saves nothing
  }
  // Nothing but our Tensor handle holds a's numbers: not the graph, not a node.
  CHECK(a_values.storage_use_count() == 1);
  const Var a = loss.grad_fn()->inputs.at(0).grad_fn()->inputs.at(0);
  CHECK_FALSE(a.is_leaf());
  CHECK(a.shape() == Shape{3});  // the shape outlives the values
  CHECK(a.numel() == 3);
  const std::string err = error_of([&] { (void)a.data(); });
  CHECK(has(err, "mul_scalar output (3)"));
  CHECK(has(err, "freed"));
  CHECK(has(err, "RetainValuesGuard"));
  loss.backward();
  for (int64_t i = 0; i < 3; ++i) CHECK(x.grad().at({i}) == 2);  // d sum(2x + 1) / dx
  // A handle held across the op keeps the values, as does a RetainValuesGuard.
  Var b = x * real(3);
  Var c = b + real(1);
  CHECK(b.data().at({1}) == -6);
  {
    RetainValuesGuard keep_values;
    c = (x * real(4)) + real(1);
  }
  CHECK(c.grad_fn()->inputs.at(0).data().at({2}) == 12);
}

// ---- misc ---------------------------------------------------------------------------

TEST_CASE("topological_order lists every input before the ops that read it") {
  Var a = leaf({1}), b = leaf({2});
  Var c = a * b;
  Var d = c + a;
  Var e = d * c;
  const VarList order = topological_order(e);
  REQUIRE(order.size() == 5);
  auto pos = [&](const Var& v) {
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i].same_as(v)) return static_cast<int>(i);
    return -1;
  };
  CHECK(pos(a) < pos(c));
  CHECK(pos(b) < pos(c));
  CHECK(pos(c) < pos(d));
  CHECK(pos(d) < pos(e));
  CHECK(pos(e) == 4);
  // Variables that do not require grad are not part of the backward graph.
  Var k = leaf({3}, false);
  CHECK(topological_order(a * k).size() == 2);
}

TEST_CASE("Var basics: handle semantics, names, undefined Vars report errors") {
  Var x = leaf({1, 2, 3});
  Var alias = x;
  CHECK(alias.same_as(x));
  alias.data().at({0}) = 10;
  CHECK(x.data().at({0}) == 10);
  CHECK(x.shape() == Shape{3});
  CHECK(x.numel() == 3);
  CHECK(x.size(-1) == 3);
  CHECK(x.set_name("weights").name() == "weights");
  Var u;
  CHECK_FALSE(u.defined());
  CHECK_FALSE(u.requires_grad());
  CHECK(has(error_of([&] { u.data(); }), "Var is undefined"));
  CHECK(has(error_of([&] { u.grad(); }), "Var is undefined"));
  CHECK(has(error_of([] { Var v{Tensor()}; }), "Var: tensor is undefined"));
  CHECK(has(error_of([&] { x* u; }), "undefined"));
}
