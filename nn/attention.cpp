// Multi-head attention (Vaswani et al., section 3.2) as one fused op with a
// hand-written backward. This file holds the maths (this comment), the masks
// and argument checks, the Node adapter and the public op and module; the
// kernels are in files of their own (nn/attention_internal.h lists them):
//   1. the maths, forward and backward (this comment);
//   2. forward: project_inputs (nn/attention_projections.cpp) makes Q, K, V,
//      stacked so one sgemm serves each input; then the heads' kernel, by
//      default attention_forward (nn/attention_standard.cpp: scores, mask,
//      softmax, P V);
//   3. backward, in reverse: the heads' gradient (attention_backward for
//      the standard kernel), then project_inputs_backward;
//   4. AttentionNode, the adapter: what forward saves, and a backward that
//      calls the kernels;
//   5. multi_head_attention, the public op, and the MultiHeadAttention module.
//
// Sizes: B batch, T query (target) length, S key (source) length, D d_model,
// H heads, d_k the query/key head size (D / H unless set apart, Table 3 row
// B), d_v = D / H the value head size, E = H*d_k.
//
// Forward. xq (B,T,D) gives the queries, xkv (B,S,D) the keys and values
// (the same tensor for self-attention):
//   Q = xq Wq^T + bq                         (B*T, E)
//   K = xkv Wk^T + bk                        (B*S, E)
//   V = xkv Wv^T + bv                        (B*S, D)
//   per sequence b and head h, with Q_h, K_h the h-th block of d_k columns
//   and V_h the h-th block of d_v columns:
//     Z   = Q_h K_h^T / sqrt(d_k) + M        (T, S)    scores; M = -inf where the mask hides a key
//                                                      (the scale 1/sqrt(d_k) unless options say)
//     P   = softmax(Z), row by row           (T, S)    kept for backward
//     O_h = P V_h                            (T, d_v)
//   Y = O Wo^T + bo                          (B*T, D), O = concat_h(O_h) (B*T, H*d_v = D)
// The scores are called Z (and their gradient dZ) because S is the key length.
//
// Backward, from dY (B*T, D). Each step but the softmax is a matrix product
// C = A B, whose gradients are dA = dC B^T and dB = A^T dC:
//   dO   = dY Wo,  dWo = dY^T O,  dbo = sum of dY's rows
//   dV_h = P^T dO_h                          (S, T) x (T, d_v) -> (S, d_v)
//   dP   = dO_h V_h^T                        (T, d_v) x (d_v, S) -> (T, S)
//   dZ   = P * (dP - rowsum(dP * P))         (T, S), * elementwise
//          One row: p = softmax(z) has dp_j/dz_i = p_j (delta_ij - p_i), so
//          dz_i = sum_j dp_j p_j (delta_ij - p_i) = p_i (dp_i - sum_j dp_j p_j).
//          It needs P only. A hidden key has p = 0, so its dZ is 0: the mask
//          needs no test in backward.
//   dQ_h = dZ K_h / sqrt(d_k)                (T, S) x (S, d_k) -> (T, d_k)
//   dK_h = dZ^T Q_h / sqrt(d_k)              (S, T) x (T, d_k) -> (S, d_k)
//   dxq  = dQ Wq,          dWq = dQ^T xq,    dbq = sum of dQ's rows
//   dxkv = dK Wk + dV Wv,  dWk = dK^T xkv,   dWv = dV^T xkv,  dbk, dbv likewise
// For self-attention xq and xkv are one tensor, and its gradient is the sum
// of all three. docs/attention-backward.md derives every step at length.
//
// Heads are never copied out: head h of Q is the column block
// [h*d_k, (h+1)*d_k) of the (B*T, E) matrix (or of a wider stacked one), which
// sgemm reads in place, the matrix's row stride as its leading dimension.
#include "nn/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/error.h"
#include "core/parallel.h"
#include "nn/attention_internal.h"

namespace qkv::nn {

using detail::AttentionSizes;
using detail::HeadOutputs;
using detail::InputGrads;
using detail::InputProjectionGrads;
using detail::InputProjections;

// ---- Masks, kernels and patterns --------------------------------------------------------

bool AttentionMask::hidden(int64_t b, int64_t i, int64_t j, int64_t T, int64_t S) const {
  if (causal && j > i) return true;
  if (!key_lengths.empty() && j >= key_lengths[b]) return true;
  if (mask.defined()) {
    const real* m = mask.data();
    const int64_t off = mask.dim() == 3 ? b * T * S : 0;
    if (m[off + i * S + j] != 0) return true;
  }
  return false;
}

bool SparsePattern::visible(int64_t i, int64_t j) const {
  if (std::abs(i - j) < window) return true;
  return global_every > 0 && (i % global_every == 0 || j % global_every == 0);
}

const char* to_string(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::Standard:
      return "standard";
    case AttentionKernel::MemoryEfficient:
      return "memory-efficient";
    case AttentionKernel::Sparse:
      return "sparse";
    case AttentionKernel::Linear:
      return "linear";
    case AttentionKernel::Auto:
      return "auto";
  }
  return "?";
}

AttentionKernel attention_kernel_from_string(const std::string& s) {
  for (AttentionKernel k :
       {AttentionKernel::Standard, AttentionKernel::MemoryEfficient, AttentionKernel::Sparse,
        AttentionKernel::Linear, AttentionKernel::Auto})
    if (s == to_string(k)) return k;
  if (s == "flash") return AttentionKernel::MemoryEfficient;
  throw Error("attention: unknown kernel '" + brief(s) +
              "' (standard, memory-efficient or flash, sparse, linear, auto)");
}

// ---- The Node adapter -------------------------------------------------------------------

// Saves exactly what backward needs: the inputs and weights for the
// projections' gradients, the projections Q, K, V, and what the heads'
// kernel needs: the probabilities P (standard), each row's log-sum-exp lse
// (memory-efficient, sparse), nothing more (linear); and the head outputs O,
// which the standard kernel keeps only when the memory policy says
// (nn/attention_internal.h; otherwise backward makes O again from P and V).
// These are tensors forward made anyway, shared, not copied; the one copy is
// the weight stack ([Wq; Wk; Wv], or [Wk; Wv] for cross-attention) that
// project_inputs makes when the caller's weights are not already rows of one
// buffer, kept until backward.
struct AttentionNode : Node {
  AttentionSizes dims{};
  bool has_bias = false;
  AttentionKernel kernel = AttentionKernel::Standard;  // never Auto
  real scale = 1;
  AttentionMask mask;  // the blocks, sparse and linear kernels mask again in backward
  SparsePattern sparse;
  Tensor xq, xkv;       // (B,T,D), (B,S,D)
  InputProjections in;  // stacked weights and Q, K, V
  Tensor P;             // (B,H,T,S), standard kernel
  Tensor lse;           // (B,H,T), memory-efficient and sparse kernels
  Tensor O;             // (B*T, D), or undefined: recompute (standard kernel)
  Tensor wo;            // (D, D)
  const char* name() const override { return "multi_head_attention"; }
  OpDoc doc() const override {
    return {
        "Y = concat_h(softmax(Q_h K_h^T / sqrt(d_k) + mask) V_h) Wo^T + bo,  Q = xq Wq^T + bq, K, "
        "V from xkv",
        "dP = dO_h V_h^T,  dZ = P * (dP - rowsum(dP * P)),  dQ_h = dZ K_h / sqrt(d_k),  dK_h = "
        "dZ^T Q_h / sqrt(d_k),  dV_h = P^T dO_h",
        "docs/attention-backward.md#backward-step-by-step"};
  }
  std::vector<std::pair<std::string, Tensor>> inspect() const override { return {{"P", P}}; }

  // forward: the heads' kernel (O_h = attend(Q_h, K_h, V_h) for every head)
  //   dQ, dK, dV from dO, in the stacked layout of Q, K, V
  void heads_backward(InputProjectionGrads& dproj, real* O_again, const Tensor& dO,
                      const Tensor& O_used) {
    switch (kernel) {
      case AttentionKernel::Standard:
        detail::attention_backward(dproj.columns(dims), O_again, dO.data(), P.data(),
                                   in.columns(dims), dims, scale);
        break;
      case AttentionKernel::MemoryEfficient:
        detail::blockwise_backward(dproj.columns(dims), dO.data(), O_used.data(), lse.data(),
                                   in.columns(dims), mask, dims, scale);
        break;
      case AttentionKernel::Sparse:
        detail::sparse_backward(dproj.columns(dims), dO.data(), O_used.data(), lse.data(),
                                in.columns(dims), mask, sparse, dims, scale);
        break;
      case AttentionKernel::Linear:
        detail::linear_attention_backward(dproj.columns(dims), dO.data(), O_used.data(),
                                          in.columns(dims), mask, dims);
        break;
      case AttentionKernel::Auto:
        break;  // resolved in forward
    }
  }

  TensorList backward(const Tensor& dY) override {
    const int64_t BT = dims.B * dims.T, D = dims.D, E = dims.E();
    // forward: Y = O Wo^T + bo.  dO = dY Wo and dbo now; dWo = dY^T O after
    // the heads, which make O again when it was not kept.
    const bool recompute_O = !O.defined();
    Tensor O_used = recompute_O ? Tensor::empty({BT, D}) : O;  // (B*T, D)
    Tensor dO = Tensor::empty({BT, D});                        // (B*T, D)
    Tensor dWo = Tensor::empty({D, D});                        // (D, D)
    Tensor dbo = has_bias ? Tensor::empty({D}) : Tensor();     // (D)
    linear_backward(dY.data(), O_used, wo.data(), D, dO.data(), nullptr,
                    has_bias ? dbo.data() : nullptr);  // reads only O_used's shape

    // forward: the heads' kernel.  dQ, dK, dV (and O again if not kept)
    InputProjectionGrads dproj(in, dims);
    heads_backward(dproj, recompute_O ? O_used.data() : nullptr, dO, O_used);
    //   dWo = dY^T O   (D, B*T) x (B*T, D) -> (D, D)
    linear_backward(dY.data(), O_used, wo.data(), D, nullptr, dWo.data(), nullptr);

    // forward: project_inputs (Q, K, V from xq and xkv)
    //   dxq, dxkv, and dW, db for [Wq; Wk; Wv], [bq; bk; bv]
    InputGrads g = detail::project_inputs_backward(dproj, in, xq, xkv, needs_grad(0), needs_grad(1),
                                                   has_bias, dims);
    // (E, D), (E, D), (D, D): the row blocks of d[Wq; Wk; Wv] (2E+D, D)
    Tensor dWq = g.dW.slice0(0, E), dWk = g.dW.slice0(E, 2 * E),
           dWv = g.dW.slice0(2 * E, 2 * E + D);
    if (has_bias) {
      // (E), (E), (D), of d[bq; bk; bv] (2E+D)
      Tensor dbq = g.db.slice0(0, E), dbk = g.db.slice0(E, 2 * E),
             dbv = g.db.slice0(2 * E, 2 * E + D);
      return {g.dxq, g.dxkv, dWq, dbq, dWk, dbk, dWv, dbv, dWo, dbo};
    }
    return {g.dxq, g.dxkv, dWq, dWk, dWv, dWo};
  }
  void release_saved() override {
    xq = xkv = P = lse = O = wo = Tensor();
    in = InputProjections();
    mask = AttentionMask();
  }
};

// ---- The public op ----------------------------------------------------------------------

namespace {

void check_mask(const AttentionMask& m, int64_t B, int64_t T, int64_t S) {
  if (!m.key_lengths.empty()) {
    if (static_cast<int64_t>(m.key_lengths.size()) != B)
      throw Error("attention: " + std::to_string(m.key_lengths.size()) +
                  " key lengths for a batch of " + std::to_string(B));
    for (int64_t b = 0; b < B; ++b)
      if (m.key_lengths[b] < 0 || m.key_lengths[b] > S)
        throw Error("attention: key length " + std::to_string(m.key_lengths[b]) + " of sequence " +
                    std::to_string(b) + " is outside [0, " + std::to_string(S) + "]");
  }
  // causal with T > S is allowed: queries past S simply see all S keys.
  if (m.mask.defined()) {
    const Shape& s = m.mask.shape();
    const bool ok = (s == Shape{T, S}) || (s == Shape{B, T, S});
    if (!ok)
      throw Error("attention: mask of shape " + to_string(s) + " does not match (T,S) = (" +
                  std::to_string(T) + "," + std::to_string(S) + ") or (B,T,S)");
  }
}

// The sizes, after checking every shape; throws naming the op and the shapes.
AttentionSizes check_arguments(const Var& xq, const Var& xkv, const AttentionWeights& w,
                               int64_t heads, int64_t d_k_option) {
  const Shape& qs = xq.shape();
  const Shape& ks = xkv.shape();
  if (qs.size() != 3 || ks.size() != 3 || qs[0] != ks[0] || qs[2] != ks[2])
    throw Error("attention: query " + to_string(qs) + " and key/value " + to_string(ks) +
                ": expected (B,T,D) and (B,S,D) with the same B and D");
  const int64_t B = qs[0], T = qs[1], S = ks[1], D = qs[2];
  if (heads <= 0 || D % heads != 0)
    throw Error("attention: d_model " + std::to_string(D) + " is not divisible by " +
                std::to_string(heads) + " heads");
  if (d_k_option < 0)
    throw Error("attention: d_k " + std::to_string(d_k_option) + " is negative (0: D / heads)");
  const int64_t d_v = D / heads, d_k = d_k_option > 0 ? d_k_option : d_v, E = heads * d_k;
  // wq, wk (H*d_k, D); wv, wo (D, D). wv and wo first: they tell an input of
  // the wrong width D from a d_k that disagrees with wq, wk.
  const char* names[4] = {"wq", "wk", "wv", "wo"};
  const Var* ws[4] = {&w.wq, &w.wk, &w.wv, &w.wo};
  for (int i : {2, 3, 0, 1}) {
    const int64_t rows = i < 2 ? E : D;
    if (!ws[i]->defined() || ws[i]->shape() != Shape{rows, D})
      throw Error("attention: weight " +
                  (ws[i]->defined() ? to_string(ws[i]->shape()) : std::string("undefined")) +
                  " should be (" + std::to_string(rows) + "," + std::to_string(D) + ") (" +
                  names[i] +
                  (i < 2 ? ": (H*d_k, D) with d_k " + std::to_string(d_k) + ")" : ": (D, D))"));
  }
  if (w.bq.defined()) {
    const Var* bs[4] = {&w.bq, &w.bk, &w.bv, &w.bo};
    for (int i = 0; i < 4; ++i) {
      const int64_t n = i < 2 ? E : D;
      if (!bs[i]->defined() || bs[i]->shape() != Shape{n})
        throw Error(std::string("attention: bias b") + (names[i] + 1) + " " +
                    (bs[i]->defined() ? to_string(bs[i]->shape()) : std::string("undefined")) +
                    " should be (" + std::to_string(n) +
                    ") (biases: all undefined, or bq, bk (H*d_k) and bv, bo (D))");
    }
  }
  return {B, T, S, D, heads, d_k, d_v};
}

// The kernel that runs: Auto resolved by the budget, and each kernel's
// limits checked (one line naming the op, the kernel and the shapes).
AttentionKernel choose_kernel(const AttentionOptions& o, const AttentionSizes& d) {
  // (made only when throwing: a steady-state step allocates nothing)
  auto shapes = [&] {
    return " (B,H,T,S) = (" + std::to_string(d.B) + "," + std::to_string(d.H) + "," +
           std::to_string(d.T) + "," + std::to_string(d.S) + ")";
  };
  if (o.memory_budget < 0)
    throw Error("attention: negative memory budget " + std::to_string(o.memory_budget));
  const int64_t p_bytes = d.B * d.H * d.T * d.S * static_cast<int64_t>(sizeof(real));
  AttentionKernel k = o.kernel;
  if (k == AttentionKernel::Auto)
    k = (o.memory_budget == 0 || p_bytes <= o.memory_budget) ? AttentionKernel::Standard
                                                             : AttentionKernel::MemoryEfficient;
  if (o.keep_probs && k != AttentionKernel::Standard)
    throw Error(std::string("attention: keep_probs needs the standard kernel, not ") +
                to_string(k));
  if (k == AttentionKernel::MemoryEfficient && o.memory_budget > 0 &&
      o.memory_budget < detail::kBlockBytes)
    throw Error("attention: a memory budget of " + std::to_string(o.memory_budget) +
                " bytes cannot hold one (" + std::to_string(detail::kQueryBlock) + "," +
                std::to_string(detail::kKeyBlock) + ") block of scores and gradients (" +
                std::to_string(detail::kBlockBytes) + " bytes)" + shapes());
  if (k == AttentionKernel::Sparse || k == AttentionKernel::Linear) {
    if (o.mask.mask.defined())
      throw Error(std::string("attention: the ") + to_string(k) +
                  " kernel takes causal and padding masks, not a mask tensor of shape " +
                  to_string(o.mask.mask.shape()));
  }
  if (k == AttentionKernel::Sparse) {
    const SparsePattern& p = o.sparse;
    if (p.window < 1 || p.window > d.S)
      throw Error("attention: sparse window " + std::to_string(p.window) +
                  " is outside [1, S] for" + shapes());
    if (p.global_every < 0)
      throw Error("attention: sparse global_every " + std::to_string(p.global_every) +
                  " is negative");
  }
  if (k == AttentionKernel::Linear && o.mask.causal && d.T != d.S)
    throw Error("attention: causal linear attention needs T == S," + shapes());
  return k;
}

}  // namespace

namespace detail {

AttentionResult multi_head_attention(const Var& xq, const Var& xkv, const AttentionWeights& w,
                                     const AttentionOptions& o, HeadOutputs head_outputs) {
  const AttentionSizes dims = check_arguments(xq, xkv, w, o.heads, o.d_k);
  const int64_t B = dims.B, T = dims.T, S = dims.S, D = dims.D, H = dims.H;
  check_mask(o.mask, B, T, S);
  const AttentionKernel kernel = choose_kernel(o, dims);
  const real scale = o.scale != 0 ? o.scale : real(1) / std::sqrt(static_cast<real>(dims.d_k));
  const bool has_bias = w.bq.defined();
  auto node = make_node<AttentionNode>();

  // Q, K, V  (B*T, E), (B*S, E), (B*S, D), stacked
  node->in = project_inputs(xq, xkv, xq.same_as(xkv), w, dims);
  const detail::QKVColumns in = node->in.columns(dims);
  // O_h = attend(Q_h, K_h, V_h)   for every head, by the chosen kernel
  Tensor O = Tensor::empty({B * T, D});  // (B*T, D), head h in columns [h*d_v, (h+1)*d_v)
  Tensor P, lse;
  switch (kernel) {
    case AttentionKernel::Standard:
      // P = softmax(Q_h K_h^T / sqrt(d_k) + M),  O_h = P V_h
      P = Tensor::empty({B, H, T, S});  // (B,H,T,S)
      attention_forward(P.data(), O.data(), in, o.mask, dims, scale);
      break;
    case AttentionKernel::MemoryEfficient:
      lse = Tensor::empty({B, H, T});  // (B,H,T)
      blockwise_forward(lse.data(), O.data(), in, o.mask, dims, scale);
      break;
    case AttentionKernel::Sparse:
      lse = Tensor::empty({B, H, T});  // (B,H,T)
      sparse_forward(lse.data(), O.data(), in, o.mask, o.sparse, dims, scale);
      break;
    case AttentionKernel::Linear:
      linear_attention_forward(O.data(), in, o.mask, dims);
      break;
    case AttentionKernel::Auto:
      break;  // resolved by choose_kernel
  }
  // Y = O Wo^T + bo   (B*T, D) x (D, D) -> (B, T, D)
  Tensor Y = Tensor::empty({B, T, D});  // (B,T,D)
  linear_forward(O, w.wo.data().data(), has_bias ? w.bo.data().data() : nullptr, D, Y.data());

  // Save for backward (shared, not copied); the standard kernel's O only if
  // the memory policy keeps it.
  node->dims = dims;
  node->has_bias = has_bias;
  node->kernel = kernel;
  node->scale = scale;
  if (kernel != AttentionKernel::Standard) node->mask = o.mask;
  node->sparse = o.sparse;
  node->xq = xq.data();
  node->xkv = xkv.data();
  node->wo = w.wo.data();
  node->P = P;
  node->lse = lse;
  const bool keep_O =
      kernel != AttentionKernel::Standard || head_outputs == HeadOutputs::Keep ||
      (head_outputs == HeadOutputs::Auto && attention_keeps_head_outputs(B, T, S, D, H));
  if (keep_O) node->O = O;
  AttentionResult r;
  r.kernel = kernel;
  if (o.keep_probs) r.probs = P;
  if (has_bias)
    r.out = make_result(Y, node, {xq, xkv, w.wq, w.bq, w.wk, w.bk, w.wv, w.bv, w.wo, w.bo});
  else
    r.out = make_result(Y, node, {xq, xkv, w.wq, w.wk, w.wv, w.wo});
  return r;
}

}  // namespace detail

AttentionResult multi_head_attention(const Var& xq, const Var& xkv, const AttentionWeights& w,
                                     const AttentionOptions& o) {
  return detail::multi_head_attention(xq, xkv, w, o, HeadOutputs::Auto);
}

// ---- The module -------------------------------------------------------------------------

MultiHeadAttention::MultiHeadAttention(int64_t d_model_, int64_t heads_, bool bias, Generator& g,
                                       int64_t d_k_)
    : d_model(d_model_),
      heads(heads_),
      d_k(d_k_ > 0     ? d_k_
          : heads_ > 0 ? d_model_ / heads_
                       : 0),
      d_v(heads_ > 0 ? d_model_ / heads_ : 0) {
  if (heads <= 0 || d_model % heads != 0)
    throw Error("MultiHeadAttention: d_model " + std::to_string(d_model) + " is not divisible by " +
                std::to_string(heads) + " heads");
  if (d_k_ < 0)
    throw Error("MultiHeadAttention: d_k " + std::to_string(d_k_) +
                " is negative (0: d_model / heads)");
  const int64_t D = d_model, E = heads * d_k;
  w_q = register_module("w_q", std::make_shared<Linear>(D, E, bias, g));  // (E, D)
  w_k = register_module("w_k", std::make_shared<Linear>(D, E, bias, g));  // (E, D)
  w_v = register_module("w_v", std::make_shared<Linear>(D, D, bias, g));  // (D, D)
  w_o = register_module("w_o", std::make_shared<Linear>(D, D, bias, g));  // (D, D)
  // Keep W_Q, W_K, W_V (and their biases) back to back in one buffer, so the
  // fused op computes the three projections of an input with one sgemm and
  // no packing copy. Each parameter stays its own (E, D) or (D, D) view, by name.
  const int64_t rows[4] = {0, E, 2 * E, 2 * E + D};  // where each block starts, and the end
  Tensor W = Tensor::empty({2 * E + D, D});
  Linear* parts[3] = {w_q.get(), w_k.get(), w_v.get()};
  for (int i = 0; i < 3; ++i) {
    Tensor view = W.slice0(rows[i], rows[i + 1]);
    view.copy_(parts[i]->weight.data());
    parts[i]->weight.data() = view;
  }
  if (bias) {
    Tensor b = Tensor::empty({2 * E + D});
    for (int i = 0; i < 3; ++i) {
      Tensor view = b.slice0(rows[i], rows[i + 1]);
      view.copy_(parts[i]->bias.data());
      parts[i]->bias.data() = view;
    }
  }
}

AttentionWeights MultiHeadAttention::weights() const {
  return {w_q->weight, w_q->bias, w_k->weight, w_k->bias,
          w_v->weight, w_v->bias, w_o->weight, w_o->bias};
}

Var MultiHeadAttention::forward(const Var& xq, const Var& xkv, const AttentionMask& mask) {
  ModuleScope scope(this);
  AttentionOptions o;
  o.heads = heads;
  o.d_k = d_k;
  o.mask = mask;
  o.kernel = keep_attention_ ? AttentionKernel::Standard : kernel;
  o.memory_budget = memory_budget;
  o.sparse = sparse;
  // A window past the keys sees them all: the same pattern, clamped so that
  // a batch of short sequences trains (the functional op refuses it).
  if (xkv.dim() == 3) o.sparse.window = std::min(sparse.window, xkv.size(1));
  o.scale = scale;
  o.keep_probs = keep_attention_;
  AttentionResult r = multi_head_attention(xq, xkv, weights(), o);
  last_attention_ = r.probs;
  return r.out;
}

}  // namespace qkv::nn
