// The mixture of experts in float64: the hand-written backward (router,
// gated sum, renormalisation, gather/scatter, load-balancing loss) against
// finite differences for x, the router and every expert weight, k = 1 and 2,
// relu/gelu and swiglu experts; and the fused layer against the same maths
// composed from primitive ops with the routing decisions as constants.
//
// Routing is a choice, piecewise constant in x and Wr: finite differences are
// only the gradient where a step of eps changes no choice. make_case draws the
// inputs, routes them, and redraws (from the same generator, so each seed
// gives one fixed case) until (1) every token's k-th largest router
// probability exceeds its (k+1)-th by kMargin = 0.02, orders of magnitude
// above what a step of eps = 1e-6 can move a probability (|dP/dx| is O(1)
// here), so no choice flips inside a difference; (2) every expert got a token
// (so each expert's weights have a gradient to check); and the capacity
// factor is E, so the capacity N k is above any expert's count and nothing is
// dropped. The test REQUIREs (1), (2) and no drops before it checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "fused_vs_composed.h"
#include "nn/moe.h"
#include "test_seed.h"

using namespace qkv;

using qkv::nn::Activation;
using qkv::testing::test_generator;

namespace {

constexpr double kMargin = 0.02;

// The gap between each token's k-th and (k+1)-th router probability, the
// smallest over the tokens (1 when k = E: nothing is left out).
double smallest_margin(const Tensor& P, int64_t k) {
  const int64_t N = P.size(0), E = P.size(1);
  double worst = 1;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> row(P.data() + n * E, P.data() + (n + 1) * E);
    std::sort(row.rbegin(), row.rend());
    if (k < E) worst = std::min(worst, row[k - 1] - row[k]);
  }
  return worst;
}

struct MoeCase {
  std::shared_ptr<nn::MoE> moe;
  Var x;
  std::vector<Var> inputs;  // x, then every parameter of the layer
};

// x (2, 3, D) and a layer of E experts whose routing is differentiable (see
// the file's comment).
MoeCase make_case(Activation act, int64_t E, int64_t k, Generator& g) {
  const int64_t D = 4, d_ff = 6;
  for (int attempt = 0; attempt < 500; ++attempt) {
    MoeCase c;
    c.moe = std::make_shared<nn::MoE>(act, D, d_ff, nn::MoESettings{E, k, double(E)}, true, g);
    // a router with large weights spreads the probabilities apart
    c.moe->router->weight.data().copy_(Tensor::normal({E, D}, 0, 1.5, g));
    c.x = Var(Tensor::normal({2, 3, D}, 0, 1, g), true);
    c.x.set_name("x");
    NoGradGuard no_grad;
    c.moe->forward(c.x);
    const nn::MoERouting& r = *c.moe->routing();
    bool every_expert = true;
    for (int64_t e = 0; e < E; ++e) every_expert = every_expert && !r.rows[e].empty();
    Tensor P = nn::moe_router(c.x, c.moe->router->weight).data();
    if (smallest_margin(P, k) < kMargin || !every_expert) continue;
    c.inputs.push_back(c.x);
    for (auto& [name, v] : c.moe->named_parameters()) {
      v.set_name(name);
      c.inputs.push_back(v);
    }
    return c;
  }
  FAIL("no draw of 500 routes with a margin of " << kMargin << " to every expert");
  return {};
}

// REQUIREs what makes routing differentiable at this point (the file's
// comment): the margin, every expert used, nothing dropped.
void require_differentiable(const MoeCase& c, int64_t k) {
  c.moe->forward(c.x);  // with a graph, in training mode: where capacity applies
  const nn::MoERouting& r = *c.moe->routing();
  Tensor P = nn::moe_router(c.x, c.moe->router->weight).data();
  REQUIRE(smallest_margin(P, k) >= kMargin);
  REQUIRE(r.dropped == 0);
  for (int64_t e = 0; e < r.E; ++e) {
    REQUIRE(!r.rows[e].empty());
    REQUIRE(int64_t(r.rows[e].size()) <= r.capacity);
  }
}

// y + aux: sum(R (y + aux)) = sum(R y) + aux sum(R), so one check covers the
// layer's output and its load-balancing loss.
std::function<Var(const std::vector<Var>&)> layer_and_aux(const MoeCase& c) {
  return [moe = c.moe](const std::vector<Var>& v) {
    Var y = moe->forward(v[0]);
    return y + moe->aux_loss();
  };
}

void check_gradients(Activation act, int64_t E, int64_t k) {
  Generator g = test_generator();
  MoeCase c = make_case(act, E, k, g);
  require_differentiable(c, k);
  auto r = gradcheck(layer_and_aux(c), c.inputs);
  INFO(r.report);
  CHECK(r.ok);
  int64_t total = 0;
  for (const Var& v : c.inputs) total += v.numel();
  CHECK(r.checked == total);
  // the load-balancing loss alone: its gradient reaches only the router
  auto aux_only = [moe = c.moe](const std::vector<Var>& v) {
    moe->forward(v[0]);
    return moe->aux_loss();
  };
  r = gradcheck(aux_only, c.inputs);
  INFO(r.report);
  CHECK(r.ok);
}

// The same maths from primitive ops, with the routing of the fused forward as
// constants: P = softmax(x Wr^T); M (N, E) 1 where the router chose e, K 1
// where the assignment was kept; gates G = P M / rowsum(P M) (k >= 2) or P M
// (k = 1); y = sum_e (G K)[:, e] * expert_e(x) with every expert run on every
// token; aux = E sum(mean(P, 0) * f). FeedForward experts composed as
// act(x W1^T + b1) W2^T + b2; SwiGLU experts as (silu(x Wg^T) * x Wu^T) Wd^T.
Var composed_moe(const nn::MoE& moe, Activation act, const std::vector<Var>& v) {
  const nn::MoERouting& r = *moe.routing();
  const int64_t N = r.N, E = r.E, D = moe.D;
  Tensor M = Tensor::zeros({N, E}), K = Tensor::zeros({N, E}), f = Tensor::empty({E});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < r.k; ++c) {
      M.data()[n * E + r.expert[n * r.k + c]] = 1;
      K.data()[n * E + r.expert[n * r.k + c]] = r.kept[n * r.k + c];
    }
  for (int64_t e = 0; e < E; ++e) f.data()[e] = real(r.chosen[e]) / real(N * r.k);
  Var x = reshape(v[0], {N, D});
  Var P = softmax(matmul(x, v[1], false, true));  // (N, E)
  Var PM = P * Var(M);
  Var G = r.k == 1 ? PM : PM / sum(PM, 1, true);
  Var W = G * Var(K);  // (N, E)
  Var y;
  size_t i = 2;
  for (int64_t e = 0; e < E; ++e) {
    Var out;  // (N, D): expert e on every token
    if (act == Activation::SwiGLU) {
      Var a = matmul(x, v[i], false, true), u = matmul(x, v[i + 1], false, true);
      out = matmul(a * sigmoid(a) * u, v[i + 2], false, true);
      i += 3;
    } else {
      Var pre = matmul(x, v[i], false, true) + v[i + 1];
      Var h = act == Activation::ReLU ? relu(pre) : gelu(pre);
      out = matmul(h, v[i + 2], false, true) + v[i + 3];
      i += 4;
    }
    Tensor onehot = Tensor::zeros({E, 1});
    onehot.data()[e] = 1;
    Var term = matmul(W, Var(onehot)) * out;  // (N, 1) * (N, D)
    y = y.defined() ? y + term : term;
  }
  Var aux = sum(mean(P, 0) * Var(f)) * real(E);
  return reshape(y, v[0].shape()) + aux;
}

void check_moe_fused_equals_composed(Activation act, int64_t E, int64_t k, double cf) {
  Generator g = test_generator();
  auto moe = std::make_shared<nn::MoE>(act, 4, 6, nn::MoESettings{E, k, cf}, true, g);
  Var x(Tensor::normal({2, 4, 4}, 0, 1, g), true);
  std::vector<Var> inputs{x};
  for (auto& [name, v] : moe->named_parameters()) inputs.push_back(v);
  // An expert that got no token is not in the fused graph (its gradient is
  // undefined, read as zero); 0 * sum(w) makes that zero explicit, to compare
  // with the composed side's zeros (its tokens times a 0 mask).
  auto fused = [moe](const std::vector<Var>& v) {
    Var y = moe->forward(v[0]);
    y = y + moe->aux_loss();
    const nn::MoERouting& r = *moe->routing();
    for (int64_t e = 0; e < r.E; ++e)
      if (r.rows[e].empty())
        for (const Var& w : moe->experts[e]->parameters()) y = y + sum(w) * real(0);
    return y;
  };
  // the composed side reads the routing of the fused forward just before it
  auto composed = [moe, act](const std::vector<Var>& v) { return composed_moe(*moe, act, v); };
  testing::check_fused_equals_composed(fused, composed, inputs);
}

}  // namespace

TEST_CASE("moe backward matches finite differences for x, router and experts, k = 1 (Switch)") {
  check_gradients(Activation::ReLU, 3, 1);
  check_gradients(Activation::SwiGLU, 3, 1);
}

TEST_CASE(
    "moe backward matches finite differences for x, router and experts, k = 2 (renormalised)") {
  check_gradients(Activation::GELU, 4, 2);
  check_gradients(Activation::SwiGLU, 3, 2);
}

TEST_CASE("moe fused equals composed from primitives, k = 1 and 2, with and without drops") {
  check_moe_fused_equals_composed(Activation::GELU, 3, 1, 3.0);  // nothing dropped
  check_moe_fused_equals_composed(Activation::GELU, 4, 2, 4.0);
  check_moe_fused_equals_composed(Activation::ReLU, 4, 2, 0.5);  // capacity 2 of 16 assignments
  check_moe_fused_equals_composed(Activation::SwiGLU, 3, 1, 0.5);
}
