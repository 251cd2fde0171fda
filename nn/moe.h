// nn::MoE: a mixture of experts in place of the feed-forward block (Shazeer
// et al. 2017, "Outrageously Large Neural Networks"; the Switch Transformer,
// Fedus et al. 2022). E expert FFNs (each the block make_ffn picks for the
// activation: FeedForward for relu/gelu, SwiGLU for swiglu) and a linear
// router D -> E. For each of the N tokens (rows of x):
//
//   P    = softmax(x Wr^T)            (N, D) x (D, E) -> (N, E), over experts
//   C_n  = the k experts of largest P[n, :] (ties: the lower index)
//   g_ne = P_ne / sum_{j in C_n} P_nj for k >= 2 (renormalised, Shazeer 2017,
//          GShard, Mixtral); g_ne = P_ne for k = 1 (the Switch Transformer:
//          renormalising one gate makes it 1 and the router learns nothing)
//   y_n  = sum_{e in C_n, kept} g_ne FFN_e(x_n)
//
// Capacity (training steps only): each expert takes at most
// ceil(capacity_factor * N * k / E) assignments per forward. Assignments
// claim capacity by rank, then token: every token's first choice (in token
// order), then every second choice, ... (GShard's order: a token's top choice
// is never crowded out by another's second). An assignment past an expert's capacity is dropped and
// counted: that expert adds nothing to the token's row, which passes on only through the layer's
// residual connection. The gates are renormalised before drops. Capacity applies to a forward that
// records a graph with the module in training mode; at inference (model.eval(), or under
// NoGradGuard) nothing is dropped, as in most MoE inference code: a token's output then depends on
// that token alone, so decoding with and without the KV cache, a sequence
// alone or in a padded batch, and any evaluation chunk size all agree.
//
// The load-balancing loss, of the last forward:
//   aux = E * sum_e f_e P_e,  f_e = (assignments the router chose for e) / (N k),
//   P_e = mean over tokens of P[:, e]
// For k = 1 this is the Switch Transformer's loss. For k >= 2, f_e counts all
// k choices of every token, as Hugging Face's Mixtral code does (GShard counts
// first choices only), since every assignment claims capacity; and it divides
// by k, which Mixtral's does not, so aux is 1 when routing is uniform for any
// k. The model adds coefficient * aux to its loss.
// f_e comes from the top-k choice and has no gradient; aux reaches the router
// through P_e: d aux / d P_ne = E f_e / N. docs/moe-backward.md, "Whose formula".
//
// The router has no bias, as in the Switch Transformer and Mixtral: a bias
// would only learn a preference for experts that is the same for every token,
// which is what the balancing loss works against.
//
// The computation is a graph of nodes, each with its own hand-written
// backward (nn/moe.cpp; docs/moe-backward.md): moe_router (x, Wr) -> P;
// per expert, moe_gather (x) -> its tokens' rows, contiguous (n_e, D); the
// expert's own fused op on them (one sgemm per matrix per expert); moe_combine
// (P, expert outputs) -> y, the gated scatter back; moe_aux (P) -> aux.
//
// Parameter names: router.weight (E, D); experts.<e>.linear1.weight ...
// (FeedForward's names) or experts.<e>.gate.weight ... (SwiGLU's).
//
//   nn::MoE moe(Activation::GELU, /*D=*/64, /*d_ff=*/256, {4, 2, 1.25});
//   Var y = moe(x);                   // (..., D) -> (..., D)
//   Var loss = task + 0.01 * moe.aux_loss();
#pragma once
#include <memory>
#include <vector>

#include "nn/ffn.h"
#include "nn/linear.h"

namespace qkv::nn {

struct MoESettings {
  int64_t experts = 0;            // E; 0 means a dense FFN (no MoE)
  int64_t experts_per_token = 1;  // k, 1 <= k <= E
  double capacity_factor = 1.25;  // > 0; capacity = ceil(cf * N * k / E)
  // The coefficient a model's training loss gives the load-balancing loss
  // (the Switch Transformer's 0.01); the layer itself does not read it.
  double aux_loss = 0.01;
};

// One line naming the setting when E, k or the capacity factor is out of
// range (E < 2, k < 1 or k > E, capacity_factor <= 0 or not finite); empty
// when they are fine.
std::string moe_settings_problem(const MoESettings& s);

// The capacity per expert for N tokens: ceil(capacity_factor * N * k / E).
int64_t moe_capacity(const MoESettings& s, int64_t N);

// The routing decisions of one forward, made from P's values (constants for
// the gradient). expert[n*k + r] is token n's r-th choice (r = 0 the largest
// P), kept[n*k + r] whether it got a place under capacity.
struct MoERouting {
  int64_t N = 0, E = 0, k = 1, capacity = 0;
  std::vector<int32_t> expert;              // (N k)
  std::vector<uint8_t> kept;                // (N k)
  std::vector<std::vector<int64_t>> rows;   // per expert: its kept tokens, in claim order
  std::vector<std::vector<int64_t>> slots;  // per expert: n*k + r of each row above
  std::vector<int64_t> chosen;              // (E) assignments the router chose, before drops
  int64_t dropped = 0;                      // assignments past capacity
};

// Chooses the top k of each row of P (N, E) and, when capacity_applies,
// applies the capacity in the claim order described above (otherwise the
// capacity is N and every assignment is kept).
MoERouting moe_route(const Tensor& P, const MoESettings& s, bool capacity_applies = true);

// The pieces, as ops (each with its hand-written backward in nn/moe.cpp).
// P (N, E) = softmax(x Wr^T); x (..., D), Wr (E, D).
Var moe_router(const Var& x, const Var& router_weight);
// The rows of x (..., D) listed in `rows`, contiguous: (rows.size(), D).
Var moe_gather(const Var& x, const std::vector<int64_t>& rows);
// y (N, D), given the shape out_shape (x's), = sum over kept assignments of
// gate * expert output row. outputs[e] is expert e's output on its rows
// (routing.rows[e].size(), D), or undefined when it got no token.
Var moe_combine(const Var& P, const std::vector<Var>& outputs,
                const std::shared_ptr<const MoERouting>& routing, const Shape& out_shape);
// aux = E * sum_e f_e mean_n P[n, e], f_e = routing.chosen[e] / (N k). Scalar.
Var moe_aux(const Var& P, const MoERouting& routing);

// A layer's feed-forward block: nn::MoE when s.experts > 0, else make_ffn's
// dense block (s is not read). `recompute`: whether the layer recomputes its
// FFN in backward (nn::Recompute FFN or Layer); refused with experts, since
// the first forward then runs without a graph and the load-balancing loss
// would reach the router with no gradient.
std::shared_ptr<FFN> make_layer_ffn(Activation act, int64_t D, int64_t d_ff, bool bias,
                                    const MoESettings& s, bool recompute,
                                    Generator& g = default_generator());

class MoE : public FFN {
 public:
  // d_ff: each expert's width as make_ffn takes it (swiglu_hidden(d_ff) for
  // swiglu); bias: the experts' biases (FeedForward's).
  MoE(Activation act, int64_t D, int64_t d_ff, const MoESettings& s, bool bias = true,
      Generator& g = default_generator());
  Var forward(const Var& x) const override;
  Var operator()(const Var& x) const { return forward(x); }
  // The load-balancing loss of the last forward (a scalar, differentiable
  // with respect to the router), undefined before the first.
  Var aux_loss() const override { return aux_; }
  // The routing of the last forward (null before the first).
  const MoERouting* routing() const override { return routing_.get(); }
  // Parameters one token uses: the router's and k experts'.
  int64_t active_parameters() const override;

  int64_t D;
  MoESettings settings;
  std::shared_ptr<Linear> router;             // D -> E, no bias
  std::vector<std::shared_ptr<FFN>> experts;  // E blocks, D -> D

 private:
  mutable Var aux_;
  mutable std::shared_ptr<const MoERouting> routing_;
};

}  // namespace qkv::nn
