// The mixture of experts' worked example (examples/worked_example.cpp,
// docs/moe-backward.md): 4 tokens, 3 experts, top 2, from router logits
// written below. Each number two or three ways: the engine (nn/moe.h's ops:
// moe_router, moe_route, moe_gather, moe_combine), by hand (plain loops in
// double, here: the routing re-derived from nn/moe.h's comment, no qkv
// kernel called) and finite differences of the by-hand forward.
//
// To make the logits exact numbers, the tokens are one-hot rows: x = I (4,4),
// so l = x Wr^T is Wr^T, and dL/dl[n, e] = dWr[e, n]. Each expert stands for
// an FFN that multiplies its row by a number: FFN_e(x) = (e + 1) x, so a
// token's output is its gates' weighted sum of 1, 2, 3 (times its one-hot
// row), and L = sum(y).
#pragma once
#include <cmath>
#include <memory>
#include <vector>

#include "autograd/ops.h"
#include "examples/by_hand.h"
#include "nn/moe.h"

namespace qkv::step {

inline constexpr int64_t kMoeTokens = 4, kMoeExperts = 3, kMoeTopK = 2;
// Capacity factor 1.0, not qkv's default 1.25: ceil(1.0 * 4 * 2 / 3) = 3 places
// per expert, so that one token overflows (1.25 gives 4: nothing is dropped).
inline constexpr double kMoeCapacityFactor = 1.0;

// The router logits l (4,3), one row per token. Expert 0 is wanted by all
// four tokens (the first choice of tokens 0 and 2, the second of 1 and 3).
inline Mat moe_logits() {
  Mat l(kMoeTokens, kMoeExperts);
  l.a = {2.0, 1.0, 0.1, 0.5, 1.5, -1.0, 1.0, -0.5, 0.8, 0.2, 0.0, 1.2};
  return l;
}

inline nn::MoESettings moe_example_settings() {
  nn::MoESettings s;
  s.experts = kMoeExperts;
  s.experts_per_token = kMoeTopK;
  s.capacity_factor = kMoeCapacityFactor;
  return s;
}

// The engine's pass.
struct MoEPass {
  Var x, Wr;  // (4,4) one-hot tokens, (3,4) = l^T
  Var P;      // (4,3) softmax(x Wr^T)
  Var y;      // (4,4) the gated sum
  std::shared_ptr<const nn::MoERouting> routing;
  Mat y_token;  // (4,1): y_n summed over its row (the only nonzero is y_nn)
  Mat dP;       // (4,3): dL/dP (P keeps its gradient: retain_grad)
  Mat dl;       // (4,3): dL/dl = dWr^T
};

inline MoEPass moe_pass() {
  const Mat l = moe_logits();
  MoEPass p;
  Tensor wr = Tensor::zeros({kMoeExperts, kMoeTokens}), x = Tensor::zeros({kMoeTokens, kMoeTokens});
  for (int64_t n = 0; n < kMoeTokens; ++n) {
    x.data()[n * kMoeTokens + n] = 1;
    for (int64_t e = 0; e < kMoeExperts; ++e)
      wr.data()[e * kMoeTokens + n] = static_cast<real>(l(n, e));
  }
  p.x = Var(x, false).set_name("x");
  p.Wr = Var(wr, true).set_name("router.weight");
  p.P = nn::moe_router(p.x, p.Wr);
  p.routing = std::make_shared<const nn::MoERouting>(
      nn::moe_route(p.P.data(), moe_example_settings(), /*capacity_applies=*/true));
  std::vector<Var> outputs(kMoeExperts);
  for (int64_t e = 0; e < kMoeExperts; ++e)
    if (!p.routing->rows[e].empty())  // expert e: its rows times e + 1
      outputs[e] = nn::moe_gather(p.x, p.routing->rows[e]) * static_cast<real>(e + 1);
  p.y = nn::moe_combine(p.P, outputs, p.routing, p.x.shape());
  p.P.retain_grad();
  sum(p.y).backward();
  const Mat y = to_mat(p.y.data()), dWr = to_mat(p.Wr.grad());
  p.y_token = Mat(kMoeTokens, 1);
  for (int64_t n = 0; n < kMoeTokens; ++n)
    for (int64_t j = 0; j < kMoeTokens; ++j) p.y_token(n, 0) += y(n, j);
  p.dP = to_mat(p.P.grad());
  p.dl = hand::transpose(dWr);
  return p;
}

// By hand, from the logits alone (nn/moe.h's rules, in plain loops).
struct MoEByHand {
  Mat P;                               // (4,3) softmax of each row of l
  std::vector<std::vector<int>> top;   // per token: its 2 experts, the larger P first
  Mat S;                               // (4,1) P's sum over the token's two experts
  Mat g;                               // (4,2) the gates P / S, in top's order
  int64_t capacity = 0;                // ceil(factor * N * k / E)
  std::vector<std::vector<int>> kept;  // per token: 1 when its choice got a place
  std::vector<std::vector<int>> rows;  // per expert: its tokens, in claim order
  Mat y;                               // (4,1) sum over kept choices of g (e + 1)
  Mat dP, dl;                          // (4,3)
};

inline MoEByHand moe_by_hand(const Mat& l) {
  const int64_t N = l.rows, E = l.cols, k = kMoeTopK;
  MoEByHand h;
  h.P = hand::softmax(l);
  h.S = h.y = Mat(N, 1);
  h.g = Mat(N, k);
  h.dP = Mat(N, E);
  h.top.assign(N, {});
  h.kept.assign(N, std::vector<int>(k, 0));
  h.rows.assign(E, {});
  for (int64_t n = 0; n < N; ++n) {
    for (int r = 0; r < k; ++r) {  // the largest P not yet taken; a tie to the lower index
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int t : h.top[n]) taken = taken || t == e;
        if (!taken && (best < 0 || h.P(n, e) > h.P(n, best))) best = e;
      }
      h.top[n].push_back(best);
      h.S(n, 0) += h.P(n, best);
    }
    for (int r = 0; r < k; ++r) h.g(n, r) = h.P(n, h.top[n][r]) / h.S(n, 0);
  }
  h.capacity = static_cast<int64_t>(std::ceil(kMoeCapacityFactor * N * k / E));
  for (int r = 0; r < k; ++r)  // first choices in token order, then second choices
    for (int64_t n = 0; n < N; ++n) {
      auto& taken = h.rows[h.top[n][r]];
      if (static_cast<int64_t>(taken.size()) < h.capacity) {
        taken.push_back(static_cast<int>(n));
        h.kept[n][r] = 1;
      }
    }
  // y_n = sum over kept r of g_r (e_r + 1). Backward from L = sum(y):
  //   dg_r = e_r + 1 when kept, 0 when dropped
  //   dP_j = (dg_j - sum_r dg_r g_r) / S  on the two chosen, 0 elsewhere
  //   dl = P * (dP - <dP, P>)            softmax's backward, row by row
  for (int64_t n = 0; n < N; ++n) {
    double dg[kMoeTopK], t = 0;
    for (int r = 0; r < k; ++r) {
      dg[r] = h.kept[n][r] ? h.top[n][r] + 1.0 : 0.0;
      h.y(n, 0) += h.g(n, r) * dg[r];
      t += dg[r] * h.g(n, r);
    }
    for (int r = 0; r < k; ++r) h.dP(n, h.top[n][r]) = (dg[r] - t) / h.S(n, 0);
  }
  h.dl = hand::softmax_backward(h.P, h.dP);
  return h;
}

// L = sum(y) as a function of the logits, by hand (the choices made anew).
inline double moe_loss_by_hand(const Mat& l) {
  const Mat y = moe_by_hand(l).y;
  double L = 0;
  for (double v : y.a) L += v;
  return L;
}

}  // namespace qkv::step
