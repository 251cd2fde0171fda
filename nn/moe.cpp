// The mixture of experts, read top to bottom:
//   1. the maths: forward, and the backward by the chain rule
//   2. moe_route        the routing decisions (no gradient): nn/moe_route.cpp
//   3. moe_router       P = softmax(x Wr^T), its node and backward
//   4. moe_gather       each expert's rows, contiguous, and the scatter-add back
//   5. moe_combine      the gated sum, with the renormalisation's backward
//   6. moe_aux          the load-balancing loss and its gradient
//   7. nn::MoE          the module: router, experts, and the forward gluing 2-6
// docs/moe-backward.md walks through the same derivation.
#include "nn/moe.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/error.h"
#include "core/parallel.h"

namespace qkv::nn {

// ============================================================================
// 1. The maths
// ============================================================================
// x (..., D) is read as N rows of D. Wr (E, D). For token n:
//   l_n  = x_n Wr^T                (D) x (D, E) -> (E)   router logits
//   P_n  = softmax(l_n)            (E)
//   C_n  = top k of P_n            a choice: constant for the gradient
//   g_ne = P_ne / S_n, S_n = sum_{j in C_n} P_nj   (k >= 2; g_ne = P_ne for k = 1)
//   y_n  = sum_{e in C_n, kept} g_ne FFN_e(x_n)
//   aux  = E sum_e f_e P_e,  P_e = (1/N) sum_n P_ne,  f_e = |{n, r: C_nr = e}| / (N k)
// Backward, given dy (N, D) and daux (a scalar):
//   dFFN_e(x_n) = g_ne dy_n                 (the expert's output row, for its own backward)
//   dg_ne = <dy_n, FFN_e(x_n)>              for kept assignments; 0 for dropped ones
//   dP_nj = (dg_nj - sum_{i in C_n} dg_ni g_ni) / S_n   for j in C_n (k >= 2), 0 off C_n
//           (g_i = p_i / S: dg_i/dp_j = delta_ij / S - p_i / S^2)
//   dP_nj = dg_nj                           (k = 1: g = p)
//   dP_ne += daux E f_e / N                 (f_e held constant)
//   dl_n  = P_n * (dP_n - <dP_n, P_n>)      softmax's backward
//   dWr   = dl^T x  (E, N) x (N, D);  dx += dl Wr  (N, E) x (E, D)
//   dx_n += the experts' dx rows, scattered back to their tokens
// No gradient: the choice C_n (piecewise constant in x), the capacity and the
// drops (counts), f_e. A dropped assignment still counts in S_n, so its P
// still gets the renormalisation's share of the gradient.

// ============================================================================
// 2. The routing decisions: nn/moe_route.cpp (moe_route, no gradient)
// ============================================================================

// ============================================================================
// 3. The router: P = softmax(x Wr^T)
// ============================================================================

namespace {
// Inputs (x, Wr). Saved: x (..., D), Wr (E, D), P (N, E).
struct MoERouterNode : Node {
  Tensor x, wr, P;
  const char* name() const override { return "moe_router"; }
  OpDoc doc() const override {
    return {"P = softmax(x Wr^T)  (over the E experts)",
            "dl = P * (dP - rowsum(dP * P)),  dx = dl Wr,  dWr = dl^T x",
            "docs/moe-backward.md#the-router"};
  }
  TensorList backward(const Tensor& dP) override {
    const int64_t N = P.size(0), E = P.size(1);
    Tensor dl = Tensor::empty({N, E});
    const real* p = P.data();
    const real* dp = dP.data();
    real* d = dl.data();
    // dl_n = P_n * (dP_n - <dP_n, P_n>)
    for (int64_t n = 0; n < N; ++n) {
      real dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += dp[n * E + e] * p[n * E + e];
      for (int64_t e = 0; e < E; ++e) d[n * E + e] = p[n * E + e] * (dp[n * E + e] - dot);
    }
    Tensor dx = needs_grad(0) ? Tensor::empty(x.shape()) : Tensor();
    Tensor dw = needs_grad(1) ? Tensor::empty(wr.shape()) : Tensor();
    // dx (N,D) = dl (N,E) Wr (E,D);  dWr (E,D) = dl^T (E,N) x (N,D)
    linear_backward(d, x, wr.data(), E, dx.defined() ? dx.data() : nullptr,
                    dw.defined() ? dw.data() : nullptr, nullptr);
    return {dx, dw};
  }
  // The explorer shows the router's probabilities.
  std::vector<std::pair<std::string, Tensor>> inspect() const override { return {{"P", P}}; }
  void release_saved() override { x = wr = P = Tensor(); }
};
}  // namespace

Var moe_router(const Var& x, const Var& router_weight) {
  const Tensor& X = x.data();              // (..., D)
  const Tensor& W = router_weight.data();  // (E, D)
  if (W.dim() != 2 || X.dim() < 1 || X.size(-1) != W.size(1) || W.size(0) < 1)
    throw Error("moe_router: input " + to_string(X.shape()) + ", router weight " +
                to_string(W.shape()) + ": expected input (..., D) and weight (E, D)");
  const int64_t E = W.size(0), D = W.size(1), N = X.numel() / std::max<int64_t>(D, 1);
  if (N == 0 || D == 0) throw Error("moe_router: input " + to_string(X.shape()) + " is empty");
  Tensor P = Tensor::empty({N, E});
  linear_forward(X, W.data(), nullptr, E, P.data());  // l (N,E) = x (N,D) Wr^T (D,E)
  real* p = P.data();
  // P_n = softmax(l_n), in place, row by row (E is small)
  for (int64_t n = 0; n < N; ++n) {
    real* row = p + n * E;
    const real m = *std::max_element(row, row + E);
    real total = 0;
    for (int64_t e = 0; e < E; ++e) total += (row[e] = std::exp(row[e] - m));
    for (int64_t e = 0; e < E; ++e) row[e] /= total;
  }
  auto node = make_node<MoERouterNode>();
  node->x = X;
  node->wr = W;
  node->P = P;
  return make_result(P, node, {x, router_weight});
}

// ============================================================================
// 4. Gathering an expert's tokens, and scattering the gradient back
// ============================================================================

namespace {
// Input x. Saved: the rows it read and x's shape. Forward: Xe[j] = x[rows[j]];
// backward: dx[rows[j]] = dXe[j] (the rows of one expert are distinct), zeros
// elsewhere.
struct MoEGatherNode : Node {
  std::vector<int64_t> rows;
  Shape x_shape;
  const char* name() const override { return "moe_gather"; }
  OpDoc doc() const override {
    return {"Xe = the rows of x routed to expert e  (n_e, D)",
            "dx[rows[j]] += dXe[j]  (a scatter-add)", "docs/moe-backward.md#gather-and-scatter"};
  }
  TensorList backward(const Tensor& dXe) override {
    Tensor dx = Tensor::zeros(x_shape);
    const int64_t D = x_shape.back(), n = int64_t(rows.size());
    const real* src = dXe.data();
    real* dst = dx.data();
    parallel_for(
        n,
        [&](int64_t b, int64_t e) {
          for (int64_t j = b; j < e; ++j) std::copy_n(src + j * D, D, dst + rows[j] * D);
        },
        grain_for(D));
    return {dx};
  }
};
}  // namespace

Var moe_gather(const Var& x, const std::vector<int64_t>& rows) {
  const Tensor& X = x.data();  // (..., D)
  if (X.dim() < 1 || X.size(-1) == 0)
    throw Error("moe_gather: input " + to_string(X.shape()) + ": expected (..., D)");
  const int64_t D = X.size(-1), N = X.numel() / D, n = int64_t(rows.size());
  for (int64_t r : rows)
    if (r < 0 || r >= N)
      throw Error("moe_gather: row " + std::to_string(r) + " outside the " + std::to_string(N) +
                  " rows of input " + to_string(X.shape()));
  Tensor Xe = Tensor::empty({n, D});  // (n_e, D)
  const real* src = X.data();
  real* dst = Xe.data();
  parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) std::copy_n(src + rows[j] * D, D, dst + j * D);
      },
      grain_for(D));
  auto node = make_node<MoEGatherNode>();
  node->rows = rows;
  node->x_shape = X.shape();
  return make_result(Xe, node, {x});
}

// ============================================================================
// 5. The gated sum: y_n = sum_{e in C_n, kept} g_ne FFN_e(x_n)
// ============================================================================

namespace {
// The gates of every assignment, (N k) in slot order n*k + r, and each
// token's S_n (the renormaliser; 1 for k = 1, where g = p).
void gates_of(const Tensor& P, const MoERouting& r, std::vector<real>& G, std::vector<real>& S) {
  const real* p = P.data();
  G.resize(r.N * r.k);
  S.resize(r.N);
  for (int64_t n = 0; n < r.N; ++n) {
    real s = 0;
    for (int64_t c = 0; c < r.k; ++c) s += p[n * r.E + r.expert[n * r.k + c]];
    S[n] = r.k == 1 ? real(1) : s;
    for (int64_t c = 0; c < r.k; ++c)
      G[n * r.k + c] = p[n * r.E + r.expert[n * r.k + c]] / S[n];  // g = p / S
  }
}

// Inputs (P, the outputs of the experts that got tokens, in expert order).
// Saved: the routing, the gates and S, and those outputs (dg needs them).
struct MoECombineNode : Node {
  std::shared_ptr<const MoERouting> routing;
  std::vector<real> G, S;       // (N k), (N)
  std::vector<Tensor> outputs;  // per expert: (n_e, D), undefined when n_e = 0
  const char* name() const override { return "moe_combine"; }
  OpDoc doc() const override {
    return {"y_n = sum over kept e in C_n of g_ne Ye_n,  g = P / S over the chosen (k >= 2)",
            "dYe_n = g_ne dy_n,  dg_ne = <dy_n, Ye_n>,  dP_j = (dg_j - sum_i dg_i g_i) / S",
            "docs/moe-backward.md#the-gated-sum"};
  }
  TensorList backward(const Tensor& dy) override {
    const MoERouting& r = *routing;
    const int64_t D = dy.size(-1);
    const real* dyp = dy.data();
    std::vector<real> dG(r.N * r.k, real(0));  // (N k); 0 for dropped assignments
    TensorList grads(1);
    size_t input = 1;
    for (int64_t e = 0; e < r.E; ++e) {
      if (!outputs[e].defined()) continue;
      const std::vector<int64_t>& rows = r.rows[e];
      const std::vector<int64_t>& slots = r.slots[e];
      const int64_t n = int64_t(rows.size());
      const real* ye = outputs[e].data();  // (n_e, D)
      Tensor dYe = needs_grad(input) ? Tensor::empty({n, D}) : Tensor();
      real* dye = dYe.defined() ? dYe.data() : nullptr;
      parallel_for(
          n,
          [&](int64_t b, int64_t end) {
            for (int64_t j = b; j < end; ++j) {
              const real* dyn = dyp + rows[j] * D;  // (D) dy of token rows[j]
              const real g = G[slots[j]];
              real dot = 0;
              for (int64_t i = 0; i < D; ++i) dot += dyn[i] * ye[j * D + i];
              dG[slots[j]] = dot;  // dg = <dy_n, Ye_n>
              if (dye)
                for (int64_t i = 0; i < D; ++i) dye[j * D + i] = g * dyn[i];  // dYe = g dy_n
            }
          },
          grain_for(2 * D));
      grads.push_back(dYe);
      ++input;
    }
    if (needs_grad(0)) {
      Tensor dP = Tensor::zeros({r.N, r.E});
      real* dp = dP.data();
      for (int64_t n = 0; n < r.N; ++n) {
        const real* dg = dG.data() + n * r.k;
        const real* g = G.data() + n * r.k;
        const int32_t* ex = r.expert.data() + n * r.k;
        if (r.k == 1) {
          dp[n * r.E + ex[0]] = dg[0];  // g = p: dp = dg
          continue;
        }
        real t = 0;  // sum_i dg_i g_i
        for (int64_t c = 0; c < r.k; ++c) t += dg[c] * g[c];
        for (int64_t c = 0; c < r.k; ++c) dp[n * r.E + ex[c]] = (dg[c] - t) / S[n];
      }
      grads[0] = dP;
    }
    return grads;
  }
  // The router's choices, for the explorer: (N, E), each token's gates on
  // the experts it was kept by, 0 elsewhere (not chosen, or dropped).
  std::vector<std::pair<std::string, Tensor>> inspect() const override {
    const MoERouting& r = *routing;
    if (G.empty()) return {};
    Tensor gates = Tensor::zeros({r.N, r.E});
    for (int64_t s = 0; s < r.N * r.k; ++s)
      if (r.kept[s]) gates.data()[(s / r.k) * r.E + r.expert[s]] = G[s];
    return {{"gates", gates}};
  }
  void release_saved() override {
    outputs.clear();
    G.clear();
    S.clear();
  }
};
}  // namespace

Var moe_combine(const Var& P, const std::vector<Var>& outputs,
                const std::shared_ptr<const MoERouting>& routing, const Shape& out_shape) {
  const MoERouting& r = *routing;
  const Tensor& Pt = P.data();
  if (Pt.dim() != 2 || Pt.size(0) != r.N || Pt.size(1) != r.E || int64_t(outputs.size()) != r.E ||
      out_shape.empty())
    throw Error("moe_combine: P " + to_string(Pt.shape()) + " and " +
                std::to_string(outputs.size()) + " expert outputs for a routing of N " +
                std::to_string(r.N) + ", E " + std::to_string(r.E));
  const int64_t D = out_shape.back();
  int64_t numel = 1;
  for (int64_t d : out_shape) numel *= d;
  if (D == 0 || numel != r.N * D)
    throw Error("moe_combine: output shape " + to_string(out_shape) + " does not hold " +
                std::to_string(r.N) + " rows");
  auto node = make_node<MoECombineNode>();
  node->routing = routing;
  node->outputs.resize(r.E);
  gates_of(Pt, r, node->G, node->S);
  VarList inputs{P};
  for (int64_t e = 0; e < r.E; ++e) {
    const int64_t n = int64_t(r.rows[e].size());
    if (!outputs[e].defined()) {
      if (n != 0)
        throw Error("moe_combine: expert " + std::to_string(e) + " has " + std::to_string(n) +
                    " rows and no output");
      continue;
    }
    const Tensor& Ye = outputs[e].data();
    if (Ye.dim() != 2 || Ye.size(0) != n || Ye.size(1) != D)
      throw Error("moe_combine: expert " + std::to_string(e) + "'s output " +
                  to_string(Ye.shape()) + ", expected (" + std::to_string(n) + ", " +
                  std::to_string(D) + ")");
    node->outputs[e] = Ye;
    inputs.push_back(outputs[e]);
  }
  Tensor Y = Tensor::zeros(out_shape);  // (N, D): a token no expert kept stays 0
  real* y = Y.data();
  const std::vector<real>& G = node->G;
  // Expert by expert (two experts may write the same row); within one expert
  // the rows are distinct, so its rows are shared among threads.
  for (int64_t e = 0; e < r.E; ++e) {
    if (!outputs[e].defined()) continue;
    const real* ye = node->outputs[e].data();  // (n_e, D)
    const std::vector<int64_t>& rows = r.rows[e];
    const std::vector<int64_t>& slots = r.slots[e];
    parallel_for(
        int64_t(rows.size()),
        [&](int64_t b, int64_t end) {
          for (int64_t j = b; j < end; ++j) {
            real* yn = y + rows[j] * D;
            const real g = G[slots[j]];
            for (int64_t i = 0; i < D; ++i) yn[i] += g * ye[j * D + i];  // y_n += g Ye_n
          }
        },
        grain_for(D));
  }
  return make_result(Y, node, inputs);
}

// ============================================================================
// 6. The load-balancing loss: aux = E sum_e f_e P_e
// ============================================================================

namespace {
// Input P (N, E). Saved: f (E).
struct MoEAuxNode : Node {
  std::vector<real> f;
  int64_t N = 0;
  const char* name() const override { return "moe_aux"; }
  OpDoc doc() const override {
    return {"aux = E sum_e f_e mean_n P_ne  (f_e: the share of assignments to e, constant)",
            "dP_ne = daux E f_e / N", "docs/moe-backward.md#the-load-balancing-loss"};
  }
  TensorList backward(const Tensor& daux) override {
    const int64_t E = int64_t(f.size());
    Tensor dP = Tensor::empty({N, E});
    const real d = daux.data()[0];
    real* dp = dP.data();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t e = 0; e < E; ++e) dp[n * E + e] = d * real(E) * f[e] / real(N);
    return {dP};
  }
};
}  // namespace

Var moe_aux(const Var& P, const MoERouting& r) {
  const Tensor& Pt = P.data();
  if (Pt.dim() != 2 || Pt.size(0) != r.N || Pt.size(1) != r.E)
    throw Error("moe_aux: P " + to_string(Pt.shape()) + " for a routing of N " +
                std::to_string(r.N) + ", E " + std::to_string(r.E));
  auto node = make_node<MoEAuxNode>();
  node->N = r.N;
  node->f.resize(r.E);
  const real* p = Pt.data();
  double aux = 0;
  for (int64_t e = 0; e < r.E; ++e) {
    node->f[e] = real(double(r.chosen[e]) / double(r.N * r.k));  // f_e
    double mean = 0;                                             // P_e
    for (int64_t n = 0; n < r.N; ++n) mean += p[n * r.E + e];
    aux += double(node->f[e]) * mean / double(r.N);
  }
  return make_result(Tensor::scalar(real(double(r.E) * aux)), node, {P});
}

// ============================================================================
// 7. The module
// ============================================================================

MoE::MoE(Activation act, int64_t D_, int64_t d_ff, const MoESettings& s, bool bias, Generator& g)
    : D(D_), settings(s) {
  const std::string problem = moe_settings_problem(s);
  if (!problem.empty()) throw Error("MoE: " + problem);
  if (D <= 0 || d_ff <= 0)
    throw Error("MoE: D and d_ff must be positive, got D " + std::to_string(D) + ", d_ff " +
                std::to_string(d_ff));
  router = register_module("router", std::make_shared<Linear>(D, s.experts, false, g));
  for (int64_t e = 0; e < s.experts; ++e)
    experts.push_back(
        register_module("experts." + std::to_string(e), make_ffn(act, D, d_ff, bias, g)));
}

std::shared_ptr<FFN> make_layer_ffn(Activation act, int64_t D, int64_t d_ff, bool bias,
                                    const MoESettings& s, bool recompute, Generator& g) {
  if (s.experts > 0 && recompute)
    throw Error(
        "MoE: a mixture of experts cannot be recomputed in backward (its load-balancing "
        "loss would get no gradient); use Recompute::None");
  if (s.experts > 0) return std::make_shared<MoE>(act, D, d_ff, s, bias, g);
  return make_ffn(act, D, d_ff, bias, g);
}

int64_t MoE::active_parameters() const {
  return router->num_parameters() + settings.experts_per_token * experts[0]->num_parameters();
}

Var MoE::forward(const Var& x) const {
  ModuleScope scope(this);
  const Tensor& X = x.data();  // (..., D)
  if (X.dim() < 1 || X.size(-1) != D)
    throw Error("MoE: input " + to_string(X.shape()) + ", expected (..., " + std::to_string(D) +
                ")");
  Var P = moe_router(x, router->weight);  // (N, E)
  // Capacity is a training device: it applies to a forward that records a
  // graph in training mode. At inference (model.eval(), or no graph) every
  // token gets its k experts, so its output depends on it alone, not on the
  // other rows of the batch, the evaluation's chunk or the KV cache's step.
  const bool capacity_applies = grad_enabled() && is_training();
  auto r = std::make_shared<const MoERouting>(moe_route(P.data(), settings, capacity_applies));
  std::vector<Var> outputs(settings.experts);
  for (int64_t e = 0; e < settings.experts; ++e)
    if (!r->rows[e].empty())  // (n_e, D) -> (n_e, D): one sgemm per matrix
      outputs[e] = experts[e]->forward(moe_gather(x, r->rows[e]));
  Var y = moe_combine(P, outputs, r, X.shape());
  aux_ = moe_aux(P, *r);
  routing_ = r;
  return y;
}

}  // namespace qkv::nn
