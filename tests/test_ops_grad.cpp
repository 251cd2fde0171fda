// float64 gradient checks of every differentiable op in autograd/ops.h, a
// composite MLP, and proof that gradcheck catches a wrong gradient.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "test_seed.h"

using namespace qkv;

static_assert(sizeof(real) == 8, "the gradient checks run in the float64 build");

namespace {
using Fn = std::function<Var(const std::vector<Var>&)>;

// gradcheck with the default (tight) tolerances; the report shows on failure.
void check_grad(const Fn& f, const std::vector<Var>& inputs) {
  const GradcheckResult r = gradcheck(f, inputs);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.max_abs_err < 1e-6);
  CHECK(r.checked > 0);
}

// The running test case's generator, shared by the helpers below and seeded
// from its name (test_seed.h): a test's inputs do not depend on which tests
// ran before it.
Generator& gen() { return testing::test_case_generator(); }
Var randn(const Shape& s) { return Var(Tensor::normal(s, 0, 1, gen()), true); }
// Values in [lo, hi).
Var randu(const Shape& s, double lo, double hi) {
  return Var(Tensor::uniform(s, static_cast<real>(lo), static_cast<real>(hi), gen()), true);
}
// |x| in [0.2, 1.5) with random signs: away from relu's kink at 0.
Var away_from_zero(const Shape& s) {
  Tensor t = Tensor::uniform(s, 0.2, 1.5, gen());
  for (int64_t i = 0; i < t.numel(); ++i)
    if (gen().uniform() < 0.5) t.data()[i] = -t.data()[i];
  return Var(t, true);
}
// Distinct values a multiple of 0.1 apart, in random order: max has no near-ties.
Var distinct(const Shape& s) {
  Tensor t = Tensor::arange(static_cast<real>(numel(s))).reshape(s);
  real* p = t.data();
  for (int64_t i = t.numel() - 1; i > 0; --i) std::swap(p[i], p[gen().randint(0, i + 1)]);
  return Var(mul(t, real(0.1)), true);
}

const std::vector<std::pair<Shape, Shape>> kBroadcastPairs = {
    {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{3}, {2, 3}}, {{2, 1, 3}, {4, 1}}, {{4, 1}, {2, 1, 3}},
    {{4, 1}, {1, 5}}, {{}, {2, 3}},  {{2, 3}, {}},  {{2, 3}, {2, 1}},    {{1, 1}, {3, 2}}};
}  // namespace

// ---- binary elementwise with broadcasting -----------------------------------------

TEST_CASE("gradcheck add/sub/mul with broadcasting in both directions") {
  for (const auto& [sa, sb] : kBroadcastPairs) {
    INFO(to_string(sa) << " op " << to_string(sb));
    Var a = randn(sa), b = randn(sb);
    check_grad([](const std::vector<Var>& v) { return add(v[0], v[1]); }, {a, b});
    check_grad([](const std::vector<Var>& v) { return sub(v[0], v[1]); }, {a, b});
    check_grad([](const std::vector<Var>& v) { return mul(v[0], v[1]); }, {a, b});
  }
}

TEST_CASE("gradcheck div with broadcasting in both directions (divisor away from 0)") {
  for (const auto& [sa, sb] : kBroadcastPairs) {
    INFO(to_string(sa) << " / " << to_string(sb));
    Var a = randn(sa), b = randu(sb, 0.5, 2);
    check_grad([](const std::vector<Var>& v) { return div(v[0], v[1]); }, {a, b});
  }
}

TEST_CASE("gradcheck a binary op where only one side requires grad") {
  Var a = randn({2, 3});
  Var b(Tensor::normal({3}, 0, 1, gen()), false);
  check_grad([](const std::vector<Var>& v) { return mul(v[0], v[1]); }, {a, b});
  check_grad([](const std::vector<Var>& v) { return div(v[1], v[0] * v[0] + real(1)); }, {a, b});
}

TEST_CASE("gradcheck the same input used on both sides (x*x, x/x, x-x)") {
  Var x = randu({3, 2}, 0.5, 2);
  check_grad([](const std::vector<Var>& v) { return v[0] * v[0]; }, {x});
  check_grad([](const std::vector<Var>& v) { return v[0] / (v[0] + real(1)); }, {x});
  check_grad([](const std::vector<Var>& v) { return (v[0] - v[0]) + v[0]; }, {x});
}

TEST_CASE("gradcheck scalar forms: add/mul/rsub/rdiv and the operators") {
  Var a = randu({2, 3}, 0.5, 2);
  check_grad([](const std::vector<Var>& v) { return add(v[0], real(1.5)); }, {a});
  check_grad([](const std::vector<Var>& v) { return mul(v[0], real(-2.5)); }, {a});
  check_grad([](const std::vector<Var>& v) { return rsub(real(3), v[0]); }, {a});
  check_grad([](const std::vector<Var>& v) { return rdiv(real(3), v[0]); }, {a});
  check_grad([](const std::vector<Var>& v) { return v[0] - real(1); }, {a});
  check_grad([](const std::vector<Var>& v) { return v[0] / real(4); }, {a});
  check_grad([](const std::vector<Var>& v) { return real(2) - v[0] * real(3); }, {a});
  check_grad([](const std::vector<Var>& v) { return real(2) / v[0] + real(1) + v[0]; }, {a});
  check_grad([](const std::vector<Var>& v) { return -v[0]; }, {a});
}

// ---- unary --------------------------------------------------------------------------

TEST_CASE("gradcheck neg/exp/tanh/sigmoid/gelu on normal inputs") {
  Var x = randn({3, 4});
  check_grad([](const std::vector<Var>& v) { return neg(v[0]); }, {x});
  check_grad([](const std::vector<Var>& v) { return exp(v[0]); }, {x});
  check_grad([](const std::vector<Var>& v) { return tanh(v[0]); }, {x});
  check_grad([](const std::vector<Var>& v) { return sigmoid(v[0]); }, {x});
  check_grad([](const std::vector<Var>& v) { return gelu(v[0]); }, {x});
  Var wide(Tensor::uniform({20}, -4, 4, gen()), true);  // gelu's tails and middle
  check_grad([](const std::vector<Var>& v) { return gelu(v[0]); }, {wide});
}

TEST_CASE("gradcheck log and sqrt on positive inputs") {
  Var x = randu({3, 4}, 0.3, 3);
  check_grad([](const std::vector<Var>& v) { return log(v[0]); }, {x});
  check_grad([](const std::vector<Var>& v) { return sqrt(v[0]); }, {x});
}

TEST_CASE("gradcheck pow with p = 2, 0.5, -1, 3 and 1.7") {
  Var x = randu({2, 5}, 0.3, 2);
  for (real p : {real(2), real(0.5), real(-1), real(3), real(1.7)}) {
    INFO("p = " << p);
    check_grad([p](const std::vector<Var>& v) { return pow(v[0], p); }, {x});
  }
  // Integer powers are fine on negative inputs too.
  Var n = randn({6});
  check_grad([](const std::vector<Var>& v) { return pow(v[0], 2); }, {n});
  check_grad([](const std::vector<Var>& v) { return pow(v[0], 3); }, {n});
}

TEST_CASE("gradcheck relu on inputs away from 0") {
  Var x = away_from_zero({4, 5});
  check_grad([](const std::vector<Var>& v) { return relu(v[0]); }, {x});
}

// ---- reductions ---------------------------------------------------------------------

TEST_CASE("gradcheck sum over each axis, keepdim both ways, and over all") {
  Var x = randn({2, 3, 4});
  for (int axis : {0, 1, 2, -1, -3})
    for (bool keep : {false, true}) {
      INFO("axis " << axis << " keepdim " << keep);
      check_grad([=](const std::vector<Var>& v) { return sum(v[0], axis, keep); }, {x});
    }
  check_grad([](const std::vector<Var>& v) { return sum(v[0]); }, {x});
  Var s(Tensor::scalar(2), true);
  check_grad([](const std::vector<Var>& v) { return sum(v[0]); }, {s});
}

TEST_CASE("gradcheck mean over each axis, keepdim both ways, and over all") {
  Var x = randn({2, 3, 4});
  for (int axis : {0, 1, 2, -2})
    for (bool keep : {false, true}) {
      INFO("axis " << axis << " keepdim " << keep);
      check_grad([=](const std::vector<Var>& v) { return mean(v[0], axis, keep); }, {x});
    }
  check_grad([](const std::vector<Var>& v) { return mean(v[0]); }, {x});
}

TEST_CASE("gradcheck max over each axis, keepdim both ways, and over all (distinct values)") {
  Var x = distinct({2, 3, 4});
  for (int axis : {0, 1, 2, -1})
    for (bool keep : {false, true}) {
      INFO("axis " << axis << " keepdim " << keep);
      check_grad([=](const std::vector<Var>& v) { return max(v[0], axis, keep); }, {x});
    }
  check_grad([](const std::vector<Var>& v) { return max(v[0]); }, {x});
  // max used twice in one graph: gradients add up at the winner.
  check_grad([](const std::vector<Var>& v) { return max(v[0], 1) * max(v[0], 1); }, {x});
}

// ---- softmax family -------------------------------------------------------------------

TEST_CASE("gradcheck softmax and log_softmax over the last axis") {
  for (const Shape& s : {Shape{5}, Shape{3, 4}, Shape{2, 3, 5}}) {
    INFO(to_string(s));
    Var x = randn(s);
    check_grad([](const std::vector<Var>& v) { return softmax(v[0]); }, {x});
    check_grad([](const std::vector<Var>& v) { return log_softmax(v[0]); }, {x});
  }
  // Large logits: still stable and correct.
  Var big(add(Tensor::normal({2, 4}, 0, 1, gen()), real(500)), true);
  check_grad([](const std::vector<Var>& v) { return log_softmax(v[0]); }, {big});
  check_grad([](const std::vector<Var>& v) { return softmax(v[0]); }, {big});
}

// ---- matmul --------------------------------------------------------------------------------

TEST_CASE("gradcheck matmul 2-D, batched, and with broadcast batch dims") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 2}},           // 2-D
      {{2, 3, 4}, {2, 4, 5}},     // batched (B, M, K) x (B, K, N)
      {{2, 3, 4}, {4, 5}},        // one weight for the batch
      {{3, 4}, {2, 4, 5}},        // one left matrix for the batch
      {{2, 1, 3, 4}, {3, 4, 2}},  // (2,1,M,K) x (3,K,N) -> (2,3,M,N)
      {{1, 3, 4}, {2, 4, 2}},     // batch of 1 broadcast whole
      {{2, 2, 3, 4}, {2, 1, 4, 3}}};
  for (const auto& [sa, sb] : cases) {
    INFO(to_string(sa) << " x " << to_string(sb));
    Var a = randn(sa), b = randn(sb);
    check_grad([](const std::vector<Var>& v) { return matmul(v[0], v[1]); }, {a, b});
  }
}

TEST_CASE("gradcheck matmul with each of the 4 transpose-flag combinations") {
  // a stored (M,K) or (K,M), b stored (K,N) or (N,K); M=3, K=4, N=2.
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      INFO("ta=" << ta << " tb=" << tb);
      Var a = randn(ta ? Shape{4, 3} : Shape{3, 4});
      Var b = randn(tb ? Shape{2, 4} : Shape{4, 2});
      check_grad([=](const std::vector<Var>& v) { return matmul(v[0], v[1], ta, tb); }, {a, b});
      // Batched with a broadcast batch dim too.
      Var ab = randn(ta ? Shape{2, 1, 4, 3} : Shape{2, 1, 3, 4});
      Var bb = randn(tb ? Shape{3, 2, 4} : Shape{3, 4, 2});
      check_grad([=](const std::vector<Var>& v) { return matmul(v[0], v[1], ta, tb); }, {ab, bb});
      // Batched a, one b (the path that folds the batch into M when ta is false).
      Var af = randn(ta ? Shape{2, 4, 3} : Shape{2, 3, 4});
      check_grad([=](const std::vector<Var>& v) { return matmul(v[0], v[1], ta, tb); }, {af, b});
    }
}

// ---- shape ---------------------------------------------------------------------------------

TEST_CASE("gradcheck reshape (with -1), transpose and permute") {
  Var x = randn({2, 3, 4});
  check_grad([](const std::vector<Var>& v) { return reshape(v[0], {4, -1}); }, {x});
  check_grad([](const std::vector<Var>& v) { return reshape(v[0], {24}); }, {x});
  for (auto [d0, d1] : {std::pair<int, int>{0, 1}, {1, 2}, {0, 2}, {-1, -2}}) {
    INFO("transpose " << d0 << "," << d1);
    check_grad([d0 = d0, d1 = d1](const std::vector<Var>& v) { return transpose(v[0], d0, d1); },
               {x});
  }
  for (const std::vector<int>& p :
       {std::vector<int>{2, 0, 1}, {1, 2, 0}, {0, 2, 1}, {-1, 0, 1}, {0, 1, 2}}) {
    INFO("permute " << p[0] << p[1] << p[2]);
    check_grad([p](const std::vector<Var>& v) { return permute(v[0], p); }, {x});
  }
  // Rank 4, as attention uses it: (B, T, H, d_k) -> (B, H, T, d_k).
  Var y = randn({2, 3, 2, 2});
  check_grad([](const std::vector<Var>& v) { return permute(v[0], {0, 2, 1, 3}); }, {y});
}

// ---- composite ---------------------------------------------------------------------------

TEST_CASE("gradcheck a 2-layer MLP: matmul + bias + tanh + matmul + mean squared error") {
  // x (B=4, 3) -> h = tanh(x W1 + b1) (4, 5) -> y = h W2 + b2 (4, 2); L = mean((y - t)^2)
  Var x = randn({4, 3}), W1 = randn({3, 5}), b1 = randn({5}), W2 = randn({5, 2}), b2 = randn({2});
  const Tensor target = Tensor::normal({4, 2}, 0, 1, gen());
  auto mlp = [target](const std::vector<Var>& v) {
    Var h = tanh(matmul(v[0], v[1]) + v[2]);  // (4,3) x (3,5) + (5) -> (4,5)
    Var y = matmul(h, v[3]) + v[4];           // (4,5) x (5,2) + (2) -> (4,2)
    Var d = y - Var(target);
    return mean(d * d);
  };
  check_grad(mlp, {x, W1, b1, W2, b2});
  // The same with pow and the transposed-weight layout nn::Linear uses (W stored (out, in)).
  Var W1t = randn({5, 3}), W2t = randn({2, 5});
  auto mlp_t = [target](const std::vector<Var>& v) {
    Var h = tanh(matmul(v[0], v[1], false, true) + v[2]);  // (4,3) x (5,3)^T
    Var y = matmul(h, v[3], false, true) + v[4];           // (4,5) x (2,5)^T
    return mean(pow(y - Var(target), 2));
  };
  check_grad(mlp_t, {x, W1t, b1, W2t, b2});
}

TEST_CASE("gradcheck a softmax-attention-like composite") {
  // scores = q k^T / sqrt(d), p = softmax(scores), out = p v: (2, 3, 4) each.
  Var q = randn({2, 3, 4}), k = randn({2, 3, 4}), v = randn({2, 3, 4});
  check_grad(
      [](const std::vector<Var>& in) {
        Var p = softmax(matmul(in[0], in[1], false, true) * real(0.5));  // (2,3,3)
        return matmul(p, in[2]);                                         // (2,3,4)
      },
      {q, k, v});
}

// ---- gradcheck itself ----------------------------------------------------------------

namespace {
// y = 3x, but backward claims dy/dx = 6 (a factor 2 too big) at element `bad`
// only, or everywhere when bad < 0.
struct WrongTripleNode : Node {
  int64_t bad = -1;
  const char* name() const override { return "wrong_triple"; }
  TensorList backward(const Tensor& g) override {
    Tensor dx = mul(g, real(3));
    if (bad < 0)
      dx.mul_(2);
    else
      dx.data()[bad] *= 2;
    return {dx};
  }
};
Var wrong_triple(const Var& x, int64_t bad) {
  auto n = std::make_shared<WrongTripleNode>();
  n->bad = bad;
  return make_result(mul(x.data(), real(3)), n, {x});
}
}  // namespace

TEST_CASE("gradcheck FAILS on a deliberately wrong gradient and names the input and element") {
  Var a = randn({2, 3}), b = randn({2, 3});
  // Element 4 of input 1 has the wrong gradient; input 0 is right.
  GradcheckResult r = gradcheck(
      [](const std::vector<Var>& v) { return v[0] * real(2) + wrong_triple(v[1], 4); }, {a, b});
  INFO(r.report);
  CHECK_FALSE(r.ok);
  CHECK(r.fail_input == 1);
  CHECK(r.fail_index == 4);
  CHECK(r.fail_analytic == doctest::Approx(2 * r.fail_numeric));
  CHECK(r.max_abs_err > 1e-2);
  CHECK(r.report.find("FAILED") != std::string::npos);
  CHECK(r.report.find("input 1") != std::string::npos);
  CHECK(r.report.find("element 4") != std::string::npos);
  // Wrong everywhere: the first element of the only input fails.
  GradcheckResult all =
      gradcheck([](const std::vector<Var>& v) { return wrong_triple(v[0], -1); }, {a});
  CHECK_FALSE(all.ok);
  CHECK(all.fail_input == 0);
  CHECK(all.fail_index == 0);
  // The correct op beside it passes.
  CHECK(gradcheck([](const std::vector<Var>& v) { return v[0] * real(3); }, {a}).ok);
}

TEST_CASE("gradcheck leaves inputs' data and existing grads as they were") {
  Var x = randn({2, 2}), w = randn({2, 2});
  sum(x * real(5)).backward();  // x has a gradient from earlier work
  const std::vector<real> data_before = x.data().to_vector();
  const std::vector<real> grad_before = x.grad().to_vector();
  GradcheckResult r =
      gradcheck([](const std::vector<Var>& v) { return matmul(v[0], v[1]); }, {x, w});
  CHECK(r.ok);
  CHECK(r.checked == 8);
  CHECK(x.data().to_vector() == data_before);
  CHECK(x.grad().to_vector() == grad_before);
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("gradcheck skips inputs without requires_grad and rejects non-leaf inputs") {
  Var x = randn({3}), c(Tensor::normal({3}, 0, 1, gen()), false);
  GradcheckResult r = gradcheck([](const std::vector<Var>& v) { return v[0] * v[1]; }, {x, c});
  CHECK(r.ok);
  CHECK(r.checked == 3);
  Var nonleaf = x * real(2);
  CHECK_THROWS_AS(gradcheck([](const std::vector<Var>& v) { return v[0]; }, {nonleaf}), Error);
  CHECK_THROWS_AS(gradcheck([](const std::vector<Var>& v) { return v[0]; }, {c}), Error);
}

TEST_CASE("gradcheck puts the callers' grads back even when it throws") {
  Var x = randn({3}), c(Tensor::normal({3}, 0, 1, gen()), false);
  sum(x * real(2)).backward();
  const std::vector<real> before = x.grad().to_vector();
  // The output does not depend on x: gradcheck throws after stashing x's grad.
  CHECK_THROWS_AS(gradcheck([](const std::vector<Var>& v) { return v[1] * real(2); }, {x, c}),
                  Error);
  REQUIRE(x.grad().defined());
  CHECK(x.grad().to_vector() == before);
  // f itself throws (shapes do not broadcast).
  Var y = randn({2});
  CHECK_THROWS_AS(gradcheck([](const std::vector<Var>& v) { return v[0] + v[1]; }, {x, y}), Error);
  REQUIRE(x.grad().defined());
  CHECK(x.grad().to_vector() == before);
}
