// "Which op made this NaN" through the library API (trainer/diverged_page.h,
// autograd/anomaly.h): a custom op taking the log of an input that became 0,
// and attention scores that overflow without the 1/sqrt(d_k) scale, each
// named by detect-anomaly mode with its operands' statistics, and named
// again by the page a diverged run writes. The third divergence, a huge
// learning rate through `train`, is tests/cli/train_which_op.sh.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "errors.h"
#include "autograd/anomaly.h"
#include "autograd/qkv_autograd.h"
#include "nn/attention.h"
#include "nn/module.h"
#include "test_seed.h"
#include "trainer/diverged_page.h"

using namespace qkv;
using qkv::testing::has;
using namespace qkv::train;

namespace {

// A user's own op, written as docs/custom-ops.md shows: y = log(x), dx = g / x.
// It gives no Node::doc(), as an op written outside the library may not.
struct LogFeaturesNode : Node {
  Tensor x;
  const char* name() const override { return "log_features"; }
  TensorList backward(const Tensor& g) override { return {div(g, x)}; }  // d log x / dx = 1 / x
  void release_saved() override { x = Tensor(); }
};
Var log_features(const Var& a) {
  const Tensor& x = a.data();
  Tensor y = Tensor::empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y.data()[i] = std::log(x.data()[i]);
  auto node = make_node<LogFeaturesNode>();
  node->x = x;
  return make_result(y, node, {a});
}

// The operand of `e` whose role starts with `role`.
const TensorStats& operand(const AnomalyError& e, const std::string& role) {
  for (const AnomalyOperand& o : e.operands)
    if (o.role.rfind(role, 0) == 0) return o.stats;
  FAIL("no operand " << role);
  static TensorStats none;
  return none;
}

}  // namespace

TEST_CASE(
    "a custom op taking the log of an input that became 0 is named by detect-anomaly mode, "
    "with its input's statistics, and by the diverged page, which says it has no docs page") {
  // relu makes the third number 0; log_features(0) = -inf: the custom op made it.
  Var a(Tensor::from_vector({0.5, 2, -1, 3}, {2, 2}), true);
  bool thrown = false;
  try {
    DetectAnomalyGuard anomaly;
    Var loss = sum(log_features(relu(a)));
    loss.backward();
  } catch (const AnomalyError& e) {
    thrown = true;
    // The expected answer: the forward of log_features, its output, not relu (which passed a
    // finite 0) and not sum (which passed the -inf on).
    CHECK(e.op == "log_features");
    CHECK_FALSE(e.backward);
    CHECK(e.input == -1);
    const TensorStats& in = operand(e, "input 0");
    CHECK(in.finite());
    CHECK(in.min == 0);  // the 0 it took the log of
    CHECK(in.max == doctest::Approx(3));
    const TensorStats& out = operand(e, "output");
    CHECK(out.neg_inf == 1);
    CHECK(out.nan == 0);
    CHECK(out.count == 4);
    CHECK(out.max == doctest::Approx(std::log(3.0)));
    CHECK(e.page.empty());

    const DivergedStep d = diverged_at_op(e, 7);
    CHECK(d.cause == DivergedStep::Cause::Op);
    CHECK(has(d.said(), "the first op whose output was not finite"));
    CHECK(has(d.said(), "forward of log_features produced -inf at [1,0]"));
    const std::string html = diverged_page_html(d, "");
    CHECK(has(html, "<b>forward</b> of <b><code>log_features</code></b>"));
    CHECK(has(html, "at step 7"));
    CHECK(has(html, "no float64 finite-difference proof"));
    CHECK(has(html, "gives no rule and no docs page"));
    // The output's row: one -Inf, red.
    CHECK(has(html, "color:#b00;font-weight:bold'>1</td></tr>"));
    CHECK(has(html, ">input 0, made by relu</td>"));
  }
  CHECK(thrown);
}

TEST_CASE(
    "attention scores that overflow without the 1/sqrt(d_k) scale are named as the forward of "
    "multi_head_attention, with the page linking its derivation") {
  Generator g = testing::test_generator();
  nn::MultiHeadAttention attn(8, 2, true, g);  // D 8, H 2, d_k 4
  attn.scale = 1;                              // unscaled scores, as --no-scale
  // x ~ 1e25: Q and K ~ 1e25, each of a score's d_k products ~1e50, far past
  // float32's 3.4e38 (so for any seed): +-inf scores, and softmax's inf - inf
  // is NaN. V and the output stay ~1e25, finite.
  Var x(mul(Tensor::normal({1, 3, 8}, 0, 1, g), real(1e25)), true);
  bool thrown = false;
  try {
    DetectAnomalyGuard anomaly;
    sum(attn.forward(x, x)).backward();
  } catch (const AnomalyError& e) {
    thrown = true;
    CHECK(e.op == "multi_head_attention");
    CHECK_FALSE(e.backward);
    CHECK(e.input == -1);
    const TensorStats& in = operand(e, "input 0");  // x, finite and huge
    CHECK(in.finite());
    CHECK(in.max_abs > 1e24);
    CHECK(operand(e, "output").nan > 0);
    CHECK(has(e.page, "docs/"));

    const std::string html = diverged_page_html(diverged_at_op(e, 3), "file:///qkv/docs/");
    CHECK(has(html, "<b>forward</b> of <b><code>multi_head_attention</code></b>"));
    CHECK(has(html, "derived in <a href='file:///qkv/docs/" + e.page.substr(5) + "'>"));
    CHECK(has(html, "backward: <code>"));
  }
  CHECK(thrown);
}

TEST_CASE(
    "a backward anomaly keeps the gradient the op was given and the one it made, and the "
    "inputs' values when the forward ran in a RetainValuesGuard") {
  // sqrt(0) = 0 is finite; its backward g / (2 sqrt(x)) is +inf at 0.
  Var a(Tensor::from_vector({4, 1, 0}), true);
  for (bool retain : {true, false}) {
    CAPTURE(retain);
    bool thrown = false;
    try {
      DetectAnomalyGuard anomaly;
      std::unique_ptr<RetainValuesGuard> keep(retain ? new RetainValuesGuard : nullptr);
      Var h = mul(a, real(1));  // an intermediate: its values are freed unless retained
      Var loss = sum(sqrt(h));
      h = Var();
      loss.backward();
    } catch (const AnomalyError& e) {
      thrown = true;
      CHECK(e.op == "sqrt");
      CHECK(e.backward);
      CHECK(operand(e, "gradient of the output").finite());
      CHECK(operand(e, "gradient for input 0").pos_inf == 1);
      CHECK(operand(e, "input 0").freed == !retain);
      if (retain) CHECK(operand(e, "input 0").min == 0);
      CHECK_FALSE(e.backward_rule.empty());
      const std::string html = diverged_page_html(diverged_at_op(e, 1), "");
      CHECK(has(html, "<b>backward</b> of <b><code>sqrt</code></b>"));
      CHECK(has(html, "it did not pass one on"));
      CHECK(
          has(html, retain ? ">input 0, made by mul_scalar</td>" : "values freed before backward"));
    }
    CHECK(thrown);
  }
}

TEST_CASE("tensor_stats counts NaN and Inf and summarises the finite numbers only") {
  const real inf = std::numeric_limits<real>::infinity();
  const TensorStats s = tensor_stats(
      Tensor::from_vector({1, -3, std::numeric_limits<real>::quiet_NaN(), inf, -inf, 2}));
  CHECK(s.count == 6);
  CHECK(s.nan == 1);
  CHECK(s.pos_inf == 1);
  CHECK(s.neg_inf == 1);
  CHECK(s.min == -3);
  CHECK(s.max == 2);
  CHECK(s.max_abs == 3);
  CHECK(s.mean == doctest::Approx(0));
  CHECK(s.std == doctest::Approx(std::sqrt(14.0 / 3)));
  const TensorStats none = tensor_stats(Tensor::from_vector({inf}));
  CHECK(std::isnan(none.mean));
  CHECK(std::isnan(none.max_abs));
}

TEST_CASE("the diverged page of a weight an update made non-finite names the parameter") {
  DivergedStep d;
  d.step = 12;
  d.cause = DivergedStep::Cause::Weights;
  d.bad_params.emplace_back(
      "decoder.layers.0.ffn.w1.weight",
      tensor_stats(Tensor::from_vector({1, std::numeric_limits<real>::quiet_NaN()})));
  CHECK(has(d.said(), "the weight decoder.layers.0.ffn.w1.weight already held a NaN or Inf"));
  CHECK(has(d.said(), "the optimizer's update of an earlier step made it"));
  const std::string html = diverged_page_html(d, "");
  CHECK(has(html, "<code>decoder.layers.0.ffn.w1.weight</code>"));
  CHECK(has(html, "<b>optimizer's update</b>"));
}

TEST_CASE(
    "the diverged page of a loss exploded on finite numbers says no op made a NaN and names the "
    "largest weights") {
  DivergedStep d;
  d.step = 2;
  d.cause = DivergedStep::Cause::Optimizer;
  d.loss = 7355;
  d.largest_params.emplace_back("tgt_embed.weight", tensor_stats(Tensor::from_vector({-60, 30})));
  CHECK(has(d.said(),
            "no op made a NaN or Inf in this step's forward or backward (the loss 7355 "
            "is finite)"));
  CHECK(has(d.said(), "the largest, tgt_embed.weight, has |w| up to 60"));
  const std::string html = diverged_page_html(d, "");
  CHECK(has(html, "<b>No op made a NaN or Inf</b> in step 2's forward or backward"));
  CHECK(has(html, ">tgt_embed.weight</td>"));
  CHECK_FALSE(has(html, "backward rule below"));  // no op, no rule
}

TEST_CASE(
    "a gradient that overflows only when summed over a variable's uses is shown as the sum, "
    "each op's own gradient finite") {
  // Each use's gradient for h is big, finite; their sum 1.5 max is not. The
  // forward stays finite: a is small.
  const real big = std::numeric_limits<real>::max() * real(0.75);
  Var a(Tensor::from_vector({1e-3, 2e-3}), true);
  bool thrown = false;
  try {
    DetectAnomalyGuard anomaly;
    Var h = mul(a, real(1));  // used twice below: its gradient is the sum of two
    add(sum(mul(h, big)), sum(mul(h, big))).backward();
  } catch (const AnomalyError& e) {
    thrown = true;
    CHECK(e.backward);
    CHECK(e.op == "mul_scalar");
    CHECK(operand(e, "gradient of the output").finite());
    CHECK(operand(e, "summed gradient for input 0").pos_inf == 2);
    CHECK(has(diverged_page_html(diverged_at_op(e, 1), ""), "its sum with the gradients from"));
  }
  CHECK(thrown);
}
