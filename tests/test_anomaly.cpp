// Detect-anomaly mode (autograd/anomaly.h): the first op whose forward output
// or backward gradient holds a NaN or Inf is named, with its shapes, the input,
// the bad element and the module it was made in; with the mode off nothing is
// checked; the guard nests.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "errors.h"
#include "autograd/anomaly.h"
#include "autograd/qkv_autograd.h"
#include "nn/module.h"
#include "models/transformer.h"
#include "test_seed.h"

using namespace qkv;
using qkv::testing::has;

using qkv::testing::test_seed;

namespace {

const real kNaN = std::numeric_limits<real>::quiet_NaN();
const real kMax = std::numeric_limits<real>::max();

// The AnomalyError f() throws; `thrown` false when it throws none.
struct Caught {
  bool thrown = false;
  std::string what, op, module;
  bool backward = false;
  int input = -2;
};
template <class F>
Caught anomaly_of(F&& f) {
  Caught c;
  try {
    f();
  } catch (const AnomalyError& e) {
    c = {true, e.what(), e.op, e.module, e.backward, e.input};
  }
  return c;
}

Var leaf(std::vector<real> v, Shape s, bool rg = true) {
  return Var(Tensor::from_vector(v, s), rg);
}

// A module whose forward is sqrt, and one holding two of them under the
// dotted names a model's layers get.
struct SqrtBlock : nn::Module {
  Var forward(const Var& x) const {
    nn::ModuleScope scope(this);
    return sqrt(x);
  }
};
struct Stack : nn::Module {
  std::shared_ptr<SqrtBlock> first, second;
  Stack() {
    first = register_module("blocks.0", std::make_shared<SqrtBlock>());
    second = register_module("blocks.1", std::make_shared<SqrtBlock>());
  }
  Var forward(const Var& x) const {
    nn::ModuleScope scope(this);
    return second->forward(first->forward(x));
  }
};
struct Outer : nn::Module {
  std::shared_ptr<Stack> stack = register_module("stack", std::make_shared<Stack>());
  Var forward(const Var& x) const {
    nn::ModuleScope scope(this);
    return stack->forward(x) * real(2);
  }
};

nn::TransformerConfig tiny_config() {
  nn::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 11;
  c.d_model = 8;
  c.heads = 2;
  c.encoder_layers = c.decoder_layers = 2;
  c.d_ff = 16;
  c.dropout = 0;
  c.seed = test_seed();
  return c;
}
const nn::Tokens kSrc{{1, 2, 3, 4, 5, 6}, 2, 3, {}};
const nn::Tokens kTgt{{7, 8, 9, 10, 1, 2, 3, 4}, 2, 4, {}};

Var param(const nn::Module& m, const std::string& name) {
  for (auto& [n, p] : m.named_parameters())
    if (n == name) return p;
  FAIL("no parameter " << name);
  return Var();
}

}  // namespace

TEST_CASE("detect-anomaly is off by default and the guard restores the previous setting, nested") {
  CHECK_FALSE(detect_anomaly_enabled());
  {
    DetectAnomalyGuard on;
    CHECK(detect_anomaly_enabled());
    {
      DetectAnomalyGuard off(false);
      CHECK_FALSE(detect_anomaly_enabled());
      {
        DetectAnomalyGuard again;
        CHECK(detect_anomaly_enabled());
      }
      CHECK_FALSE(detect_anomaly_enabled());
    }
    CHECK(detect_anomaly_enabled());
  }
  CHECK_FALSE(detect_anomaly_enabled());
  // Left by an exception, the guard still restores.
  try {
    DetectAnomalyGuard on;
    sum(log(leaf({-1}, {1}))).backward();
  } catch (const Error&) {
  }
  CHECK_FALSE(detect_anomaly_enabled());
}

TEST_CASE(
    "forward: a NaN made mid-graph is reported at the op that made it (log), with its shapes, "
    "not at the ops after it") {
  Var x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Var w = leaf({1, 0, 0, 1, 1, 1}, {3, 2});
  int reached_matmul = 0;
  DetectAnomalyGuard anomaly;
  Caught c = anomaly_of([&] {
    Var h = x * real(2) - real(5);  // (2,3): -3 -1 1 3 5 7
    Var z = log(h);                 // nan at [0,0] and [0,1]
    ++reached_matmul;
    sum(matmul(z, w)).backward();
  });
  REQUIRE(c.thrown);
  CHECK(reached_matmul == 0);
  CHECK(c.op == "log");
  CHECK_FALSE(c.backward);
  CHECK(c.input == -1);
  CHECK(has(c.what, "forward of log produced nan at [0,0] (flat index 0) in its output (2,3)"));
  CHECK(has(c.what, "inputs (2,3)"));
  CHECK(has(c.what, "made outside any module"));
  CHECK_FALSE(has(c.what, "matmul"));
}

TEST_CASE("forward: an Inf from finite inputs (overflow in matmul) is reported at matmul") {
  Var a = leaf({kMax, kMax}, {1, 2}, false);
  Var b = leaf({1, 1, 2, 2}, {2, 2}, false);
  DetectAnomalyGuard anomaly;
  Caught c =
      anomaly_of([&] { matmul(a, b); });  // kMax + kMax overflows; checked without a graph too
  REQUIRE(c.thrown);
  CHECK(c.op == "matmul");
  CHECK(has(c.what, "produced inf at [0,0]"));
  CHECK(has(c.what, "in its output (1,2); inputs (1,2), (2,2)"));
}

TEST_CASE("forward: a leaf that holds a NaN is reported as that input of the first op to read it") {
  Var x = leaf({1, 2, kNaN, 4}, {2, 2});
  DetectAnomalyGuard anomaly;
  Caught c = anomaly_of([&] { exp(x + leaf({1, 1}, {2})); });
  REQUIRE(c.thrown);
  CHECK(c.op == "add");
  CHECK(c.input == 0);
  CHECK(has(c.what,
            "input 0 of add, a leaf (2,2), holds nan at [1,0] (flat index 2) before the op ran"));
}

TEST_CASE("backward: an Inf gradient is reported as backward, naming the op and the input index") {
  SUBCASE("sqrt at 0: d sqrt(x)/dx = 1/(2 sqrt(x)) is inf at x = 0") {
    Var x = leaf({4, 0, 1}, {3});
    DetectAnomalyGuard anomaly;
    Var y = sqrt(x * real(1));  // the forward is finite: 2 0 1
    Var loss = sum(y * real(3));
    Caught c = anomaly_of([&] { loss.backward(); });
    REQUIRE(c.thrown);
    CHECK(c.backward);
    CHECK(c.op == "sqrt");
    CHECK(c.input == 0);
    CHECK(has(
        c.what,
        "backward of sqrt produced inf at [1] (flat index 1) in the gradient (3) for its input 0"));
    CHECK(has(c.what, "inputs (3), output (3)"));
    // The gradient never reached the leaf.
    CHECK_FALSE(x.grad().defined());
  }
  SUBCASE("a / b with tiny b: d/db = -a/b^2 overflows; reported as input 1") {
    Var a = leaf({1, 1}, {2});
    Var b = leaf({1, real(1e-30)}, {2});
    DetectAnomalyGuard anomaly;
    Var loss = sum(a / b);  // 1 + 1e30, finite
    Caught c = anomaly_of([&] { loss.backward(); });
    REQUIRE(c.thrown);
    CHECK(c.op == "div");
    CHECK(c.input == 1);
    CHECK(has(
        c.what,
        "backward of div produced -inf at [1] (flat index 1) in the gradient (2) for its input 1"));
  }
}

TEST_CASE(
    "backward: the gradient passed to backward, and a sum of finite gradients that overflows, "
    "are reported") {
  Var x = leaf({1, 2}, {2});
  DetectAnomalyGuard anomaly;
  Var y = x * real(1);
  Var z = y + y;  // y gets kMax from each use: the sum overflows
  Caught root = anomaly_of([&] { z.backward(Tensor::from_vector({1, kNaN}), true); });
  REQUIRE(root.thrown);
  CHECK(has(root.what, "the gradient passed to backward() holds nan at [1]"));
  Caught summed = anomaly_of([&] { z.backward(Tensor::full({2}, kMax)); });
  REQUIRE(summed.thrown);
  CHECK(summed.op == "add");
  CHECK(summed.input == 1);
  CHECK(has(summed.what,
            "the gradient (2) add gave its input 1 overflowed to inf at [0] (flat index "
            "0) when summed with the gradients from that variable's other uses"));
}

TEST_CASE("module paths: ops name the module that made them, by named_parameters' dotted names") {
  Var x = leaf({0, 4}, {2});
  Outer outer;
  DetectAnomalyGuard anomaly;
  Var y = outer.forward(x);  // 2 * sqrt(sqrt(x)), finite
  // blocks.1's sqrt meets sqrt(0) = 0 and its backward divides by it first.
  Caught c = anomaly_of([&] { sum(y).backward(); });
  REQUIRE(c.thrown);
  CHECK(c.op == "sqrt");
  CHECK(c.module == "stack.blocks.1");
  CHECK(has(c.what, "made in module stack.blocks.1"));
  REQUIRE(y.grad_fn()->module != nullptr);  // the * 2 in Outer itself: the top-level module, ""
  CHECK(std::string(y.grad_fn()->module).empty());
  // Called directly, a module's path counts from itself.
  Caught direct = anomaly_of([&] { sum(outer.stack->forward(x)).backward(); });
  CHECK(direct.module == "blocks.1");
  // No scope is left open.
  CHECK(anomaly_module() == nullptr);
}

TEST_CASE("module paths in a Transformer: a poisoned parameter is reported in its module") {
  nn::Seq2SeqTransformer model(tiny_config());
  SUBCASE("NaN in decoder.layers.0.ffn.linear1.weight: a leaf input of feed_forward") {
    param(model, "decoder.layers.0.ffn.linear1.weight").data().at({3, 5}) = kNaN;
    DetectAnomalyGuard anomaly;
    Caught c = anomaly_of([&] { model.forward(kSrc, kTgt); });
    REQUIRE(c.thrown);
    CHECK(c.op == "feed_forward");
    CHECK(c.module == "decoder.layers.0.ffn");
    CHECK(c.input == 1);
    CHECK(has(c.what, "input 1 of feed_forward, a leaf (16,8), holds nan at [3,5]"));
    CHECK(has(c.what, "made in module decoder.layers.0.ffn"));
  }
  SUBCASE("NaN in decoder.layers.1.cross_attn.w_q.weight") {
    param(model, "decoder.layers.1.cross_attn.w_q.weight").data().at({0, 0}) = kNaN;
    DetectAnomalyGuard anomaly;
    Caught c = anomaly_of([&] { model.forward(kSrc, kTgt); });
    REQUIRE(c.thrown);
    CHECK(c.op == "multi_head_attention");
    CHECK(c.module == "decoder.layers.1.cross_attn");
    CHECK(c.input == 2);
  }
  SUBCASE("finite weights that overflow: the op's own output, in decoder.layers.0.ffn") {
    // Every hidden unit >= 10 after ReLU and one output row of kMax: inf.
    param(model, "decoder.layers.0.ffn.linear1.bias").data().fill_(10);
    param(model, "decoder.layers.0.ffn.linear2.weight").data().at({2, 0}) = kMax;
    param(model, "decoder.layers.0.ffn.linear2.weight").data().at({2, 1}) = kMax;
    DetectAnomalyGuard anomaly;
    Caught c = anomaly_of([&] { model.forward(kSrc, kTgt); });
    REQUIRE(c.thrown);
    CHECK(c.op == "feed_forward");
    CHECK(c.input == -1);
    CHECK(c.module == "decoder.layers.0.ffn");
    CHECK(has(c.what, "forward of feed_forward produced inf"));
    CHECK(has(c.what, "in its output (2,4,8); inputs (2,4,8), (16,8), (16), (8,16), (8)"));
  }
}

TEST_CASE("detect-anomaly does not change a finite step's values or gradients") {
  nn::Seq2SeqTransformer model(tiny_config());
  auto step = [&] {
    model.zero_grad();
    Var loss = sum(model.forward(kSrc, kTgt));
    loss.backward();
    std::vector<std::vector<real>> out{{loss.item()}};
    for (auto& p : model.parameters()) out.push_back(p.grad().to_vector());
    return out;
  };
  const auto plain = step();
  DetectAnomalyGuard anomaly;
  CHECK(step() == plain);
}

TEST_CASE("with the mode off nothing is checked: the NaN flows through forward and backward") {
  Var x = leaf({-1, 4}, {2});
  Stack stack;
  Var y;
  CHECK_NOTHROW(y = stack.forward(log(x)));  // log(-1) = nan
  CHECK(std::isnan(y.data().to_vector()[0]));
  CHECK(y.grad_fn()->module == nullptr);  // nodes record no module when off
  CHECK_NOTHROW(sum(y).backward());
  CHECK(std::isnan(x.grad().to_vector()[0]));
  CHECK(std::isfinite(x.grad().to_vector()[1]));
}

TEST_CASE("first_non_finite finds the first NaN or +-Inf, and -1 when all are finite") {
  CHECK(first_non_finite(Tensor::from_vector({1, 2, 3})) == -1);
  CHECK(first_non_finite(Tensor::from_vector({1, -std::numeric_limits<real>::infinity(), kNaN})) ==
        1);
  CHECK(first_non_finite(Tensor::from_vector({kMax, -kMax, kNaN})) == 2);
  CHECK(first_non_finite(Tensor::zeros({0})) == -1);
}
