// The computations behind examples/step_through.cpp, the program that walks a
// learner through one gradient, step by step. The program prints what these
// functions return; tests/test_step_through.cpp checks the same numbers.
//
// Two sources of numbers, kept apart:
//   engine   qkv's autograd, read from .grad() (float32 in `make step`);
//   by hand  plain loops in double (namespace qkv::step::hand, in
//            examples/by_hand.h; this file applies them to the numbers),
//            written from the formulas alone: no qkv kernel is called. A
//            wrong kernel in the library shows as a gap between the two.
// Finite differences nudge the by-hand forward, in double too.
//
// Part 1: one query over four keys, the worked example of
//   docs/attention-backward.md: forward and backward, every gradient three
//   ways (engine, by hand, finite differences).
// Part 2: a tiny Transformer on one copy example: the gradient norm of every
//   parameter; LayerNorm's and attention's backward by hand on the model's
//   numbers, against the engine; the order in which the engine's backward
//   visits the ops.
// Part 3: examples/step_llama.h.
//
// Names as in docs/symbols.md: Z scores, P probabilities (softmax of each row
// of Z), dA = dL/dA, rowsum(A) = the sum over the last axis (one number per row).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/elementwise.h"
#include "core/error.h"
#include "examples/by_hand.h"
#include "nn/attention.h"
#include "nn/cross_entropy.h"
#include "nn/layernorm.h"
#include "models/transformer.h"

namespace qkv::step {

// ============================================================================
// Part 1. One query, four keys
// ============================================================================

// q = [1, 0] (1,2);  K = [[1,0],[0,1],[1,1],[0,0]] (4,2);  V = [1,2,3,4]^T (4,1).
struct WorkedExample {
  Tensor q, K, V;
};

inline WorkedExample worked_example() {
  return {Tensor::from_vector({1, 0}, {1, 2}),
          Tensor::from_vector({1, 0, 0, 1, 1, 1, 0, 0}, {4, 2}),
          Tensor::from_vector({1, 2, 3, 4}, {4, 1})};
}

// 1/sqrt(d_k), or 1 for the unscaled variant.
inline double attention_scale(const WorkedExample& ex, bool scaled) {
  return scaled ? 1 / std::sqrt(static_cast<double>(ex.q.size(1))) : 1.0;
}

// The engine: one forward and backward pass through qkv's autograd. Z and P
// call retain_grad(), so after out.backward() each .grad() holds dL/d(it) as
// the engine computed it, with L = out.
struct AttentionPass {
  Var q, K, V;  // leaves (1,2), (4,2), (4,1)
  Var Z;        // scores         scale * q K^T  (1,2) x (2,4) -> (1,4)
  Var P;        // probabilities  softmax(Z)     (1,4)
  Var out;      // output         P V            (1,4) x (4,1) -> (1,1)
};

inline AttentionPass attention_pass(const WorkedExample& ex, bool scaled) {
  AttentionPass p;
  p.q = Var(ex.q.clone(), true).set_name("q");
  p.K = Var(ex.K.clone(), true).set_name("K");
  p.V = Var(ex.V.clone(), true).set_name("V");
  p.Z = matmul(p.q, p.K, false, /*trans_b=*/true);
  if (scaled) p.Z = p.Z * static_cast<real>(attention_scale(ex, true));
  p.P = softmax(p.Z);
  p.out = matmul(p.P, p.V);
  p.Z.retain_grad();
  p.P.retain_grad();
  p.out.backward();  // dL/dout = 1
  return p;
}

// By hand, from q, K, V alone: one head of the maths in nn/attention.cpp
// (Section 1, derived there; docs/attention-backward.md at length), with one
// query, T = 1, and out = P V (1,1), so dout = 1 and dO_h = 1. Shapes here:
//   q (1,d), K (n,d), V (n,1); Z, P, dP, dZ (1,n); dq (1,d); dK (n,d), row j
//   is scale * dZ_j q; rowsum(dP * P) = out.
struct AttentionByHand {
  Mat Z, P, out;
  Mat dP, dZ, dq, dK, dV;
};

inline AttentionByHand attention_by_hand(const Mat& q, const Mat& K, const Mat& V, double scale) {
  AttentionByHand h;
  h.Z = hand::scaled(hand::matmul(q, hand::transpose(K)), scale);
  h.P = hand::softmax(h.Z);
  h.out = hand::matmul(h.P, V);
  h.dP = hand::transpose(V);
  h.dV = hand::transpose(h.P);
  h.dZ = hand::softmax_backward(h.P, h.dP);
  h.dq = hand::scaled(hand::matmul(h.dZ, K), scale);
  h.dK = hand::scaled(hand::matmul(hand::transpose(h.dZ), q), scale);
  return h;
}

inline AttentionByHand attention_by_hand(const WorkedExample& ex, bool scaled) {
  return attention_by_hand(to_mat(ex.q), to_mat(ex.K), to_mat(ex.V), attention_scale(ex, scaled));
}

// Finite differences of out with respect to every stage, through the by-hand
// forward: out as a function of one stage's value, everything upstream of it
// held fixed (nudging P, the other P_j stay put).
struct FiniteDifferences {
  Mat P, Z, q, K, V;
};

inline FiniteDifferences finite_differences(const WorkedExample& ex, bool scaled) {
  const Mat q = to_mat(ex.q), K = to_mat(ex.K), V = to_mat(ex.V);
  const double s = attention_scale(ex, scaled);
  const AttentionByHand h = attention_by_hand(q, K, V, s);
  auto out = [&](const Mat& q_, const Mat& K_, const Mat& V_) {
    return attention_by_hand(q_, K_, V_, s).out(0, 0);
  };
  using hand::central_difference;
  FiniteDifferences fd;
  fd.P = central_difference([&](const Mat& P) { return hand::matmul(P, V)(0, 0); }, h.P);
  fd.Z = central_difference([&](const Mat& Z) { return hand::matmul(hand::softmax(Z), V)(0, 0); },
                            h.Z);
  fd.q = central_difference([&](const Mat& x) { return out(x, K, V); }, q);
  fd.K = central_difference([&](const Mat& x) { return out(q, x, V); }, K);
  fd.V = central_difference([&](const Mat& x) { return out(q, K, x); }, V);
  return fd;
}

// ============================================================================
// Part 2. A tiny Transformer on one copy example
// ============================================================================

// Tokens: 0 pad, 1 bos, 2 eos, symbols from 3. Copy [3 4 5].
struct CopyExample {
  nn::Tokens src, tgt_in;
  std::vector<int64_t> tgt_out;  // one target per position of tgt_in; 0 (pad) is ignored
};

inline CopyExample copy_example() {
  CopyExample ex;
  ex.src = {{3, 4, 5}, 1, 3, {}};
  ex.tgt_in = {{1, 3, 4, 5}, 1, 4, {}};
  ex.tgt_out = {3, 4, 5, 2};
  return ex;
}

inline nn::TransformerConfig tiny_config() {
  nn::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 8;
  c.d_model = 8;
  c.heads = 2;
  c.encoder_layers = c.decoder_layers = 1;
  c.d_ff = 16;
  c.dropout = 0;
  c.seed = 1;
  return c;
}

// The Var that op `op` produced from parameter `param`, searched in the graph
// ending at root. Throws when no such op is in the graph.
inline Var find_op_output(const Var& root, const std::string& op, const Var& param) {
  for (const Var& v : topological_order(root)) {
    const auto& fn = v.grad_fn();
    if (!fn || op != fn->name()) continue;
    for (const Var& in : fn->inputs)
      if (in.same_as(param)) return v;
  }
  throw Error("find_op_output: no " + op + " op reads parameter '" + param.name() + "'");
}

// One forward and backward pass. The two sublayers we study keep their
// gradients (retain_grad on the Vars around them, found in the graph):
//   decoder.layers.0.norm3       x = a + ffn(a)  ->  y = layer_norm(x), one op:
//                                add_layer_norm(a, ffn(a)) makes the sum in its row pass
//                                and hands dx to both addends (d(a + f)/df = 1)
//                                (a: the sublayer's input; h is the FFN's hidden layer)
//   decoder.layers.0.cross_attn  (xq, xkv = memory) ->  multi_head_attention
// retain_all keeps every intermediate gradient (for the DOT drawing, and to
// see which ops the backward reached).
struct TinyRun {
  nn::TransformerConfig cfg;
  CopyExample ex;
  std::shared_ptr<nn::Seq2SeqTransformer> model;
  Var logits;                  // (B,T,V) = (1,4,8)
  Var loss;                    // ()
  Var ln_a, ln_b, ln_out;      // norm3's addends a and ffn(a), and its output y, (1,4,8)
  Tensor ln_x, ln_dx;          // norm3's normalised input x = a + ffn(a), and dL/dx (1,4,8)
  Var att_q, att_kv, att_out;  // cross_attn's inputs (1,4,8), (1,3,8) and output (1,4,8)
};

inline TinyRun run_tiny_transformer(bool retain_all = false) {
  TinyRun r;
  r.cfg = tiny_config();
  r.ex = copy_example();
  r.model = std::make_shared<nn::Seq2SeqTransformer>(r.cfg);
  r.model->keep_attention(true);  // cross-attention P stays readable: last_attention()
  for (auto& np : r.model->named_parameters()) np.second.set_name(np.first);  // for the labels
  {
    // The walk below reads intermediates' values (norm3's input, the
    // attention's inputs) that no handle of ours holds: keep them.
    RetainValuesGuard keep_values;
    r.logits = r.model->forward(r.ex.src, r.ex.tgt_in);
    r.loss = nn::cross_entropy(r.logits, r.ex.tgt_out, /*ignore_index=*/0);
  }

  const auto& layer = *r.model->decoder->layers.at(0);
  r.ln_out = find_op_output(r.loss, "add_layer_norm", layer.norm3->weight);
  r.ln_a = r.ln_out.grad_fn()->inputs.at(0);
  r.ln_b = r.ln_out.grad_fn()->inputs.at(1);
  r.ln_x = add(r.ln_a.data(), r.ln_b.data());
  r.att_out = find_op_output(r.loss, "multi_head_attention", layer.cross_attn->w_q->weight);
  r.att_q = r.att_out.grad_fn()->inputs.at(0);
  r.att_kv = r.att_out.grad_fn()->inputs.at(1);
  if (retain_all) {
    for (Var& v : topological_order(r.loss))
      if (!v.is_leaf()) v.retain_grad();
  } else {
    for (Var* v : {&r.ln_b, &r.ln_out, &r.att_out, &r.att_kv}) v->retain_grad();
  }
  r.loss.backward();
  // ffn(a) feeds only the sum, so the gradient it receives is dL/dx itself
  // (a's own gradient also has what flowed back through ffn).
  r.ln_dx = r.ln_b.grad();
  return r;
}

// One row of the parameter-gradient table.
struct ParamGradNorm {
  std::string group;  // "encoder.layers.0", or the first name component ("src_embed")
  std::string name;   // the rest ("self_attn.w_q.weight")
  Shape shape;
  double norm = 0;  // Frobenius norm of .grad() (0 when no gradient arrived)
};

inline double frobenius_norm(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += double(t.data()[i]) * t.data()[i];
  return std::sqrt(s);
}

// Every parameter in registration order, grouped by layer: a name
// "decoder.layers.0.norm3.weight" goes to group "decoder.layers.0".
inline std::vector<ParamGradNorm> param_grad_norms(const nn::Module& m) {
  std::vector<ParamGradNorm> rows;
  for (const auto& [full, p] : m.named_parameters()) {
    std::vector<std::string> parts;
    size_t b = 0;
    for (size_t e; (e = full.find('.', b)) != std::string::npos; b = e + 1)
      parts.push_back(full.substr(b, e - b));
    parts.push_back(full.substr(b));
    size_t g = 1;  // components in the group name
    if (parts.size() > 3 && parts[1] == "layers") g = 3;
    ParamGradNorm row;
    for (size_t i = 0; i < parts.size(); ++i) {
      std::string& dst = i < g ? row.group : row.name;
      if (!dst.empty()) dst += '.';
      dst += parts[i];
    }
    row.shape = p.shape();
    row.norm = p.grad().defined() ? frobenius_norm(p.grad()) : 0;
    rows.push_back(std::move(row));
  }
  return rows;
}

// ---- LayerNorm backward by hand, on the model's norm3 -------------------------
// x (N, D): the rows norm3 normalised (saved by the model's forward); dy: the
// gradient the engine delivered to its output. hand::layer_norm recomputes
// mean, rstd and xhat from x and applies the backward formula; finite
// differences of sum(dy * y) (its gradient in x is exactly dx, since the rest
// of the model enters only through dy) check the formula itself.
struct LayerNormByHand {
  hand::LayerNorm f;  // every piece of the formula, every row
  Mat dx_fd;          // (N,D): central differences (empty without fd)
};

inline LayerNormByHand layer_norm_by_hand(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                                          const Tensor& beta, real eps, bool with_fd = true) {
  const int64_t D = gamma.numel();
  if (x.dim() < 1 || x.shape() != dy.shape() || x.size(-1) != D || beta.shape() != gamma.shape())
    throw Error("layer_norm_by_hand: x " + to_string(x.shape()) + ", dy " + to_string(dy.shape()) +
                ", gamma " + to_string(gamma.shape()) + ", beta " + to_string(beta.shape()));
  const Mat X = to_mat(x), dY = to_mat(dy), g = to_mat(gamma), b = to_mat(beta);
  LayerNormByHand r;
  r.f = hand::layer_norm(X, dY, g, b, eps);
  if (with_fd)
    r.dx_fd = hand::central_difference(
        [&](const Mat& xx) {
          const Mat y = hand::layer_norm(xx, dY, g, b, eps).y;
          double s = 0;
          for (size_t i = 0; i < y.a.size(); ++i) s += dY.a[i] * y.a[i];
          return s;
        },
        X);
  return r;
}

// ---- Attention backward by hand, on the model's cross_attn --------------------
// The sublayer's forward and backward by hand (all heads; one sequence, B = 1),
// from its inputs xq (T,D), xkv (S,D), its weights and dY (T,D), the gradient
// at its output: the maths of nn/attention.cpp (Section 1, derived there), in
// its names, from Q = xq Wq^T + bq to dxq = dQ Wq and dxkv = dK Wk + dV Wv,
// against the engine: the fused multi_head_attention (its saved P and its dxq,
// dxkv), and, for dZ, head `head` rebuilt from qkv's primitive ops (matmul,
// softmax) on the same Q_h, K_h, V_h and dO_h (the fused op keeps its dZ in scratch).
struct AttentionBackwardCheck {
  int64_t T = 0, S = 0, H = 0, d_k = 0, head = 0;
  // By hand, head `head`:
  Mat P;          // (T,S)
  Mat dO;         // (T,d_k) this head's block of dY Wo
  Mat dP;         // (T,S)
  Mat rowdot;     // (T,1) rowsum(dP * P)
  Mat dZ;         // (T,S)
  Mat dxq, dxkv;  // (T,D), (S,D), all heads
  // The engine:
  Mat P_engine;                 // (T,S) what the fused op saved for this head
  Mat dZ_engine;                // (T,S) recomposed: head rebuilt from qkv's matmul, softmax
  Mat dxq_engine, dxkv_engine;  // the fused op's backward
};

inline AttentionBackwardCheck attention_backward_by_hand(const nn::MultiHeadAttention& m,
                                                         const Tensor& xq, const Tensor& xkv,
                                                         const Tensor& dY, int64_t head) {
  if (xq.dim() != 3 || xq.size(0) != 1 || xkv.dim() != 3 || xkv.size(0) != 1 ||
      dY.shape() != xq.shape() || head < 0 || head >= m.heads)
    throw Error("attention_backward_by_hand: needs B = 1 and 0 <= head < H; got xq " +
                to_string(xq.shape()) + ", xkv " + to_string(xkv.shape()) + ", dY " +
                to_string(dY.shape()) + ", head " + std::to_string(head));
  if (m.d_k != m.d_v)
    throw Error(
        "attention_backward_by_hand: works the paper's heads, d_k = d_v = d_model / heads; "
        "got d_k " +
        std::to_string(m.d_k) + ", d_v " + std::to_string(m.d_v));
  AttentionBackwardCheck c;
  c.T = xq.size(1);
  c.S = xkv.size(1);
  c.H = m.heads;
  c.d_k = m.d_k;
  c.head = head;
  const int64_t T = c.T, S = c.S, dk = c.d_k;
  const double scale = 1 / std::sqrt(static_cast<double>(dk));

  // The engine: the fused op on fresh leaves, weights detached so that the
  // model's own parameter gradients are left untouched.
  Var xq_leaf(xq.clone(), true), xkv_leaf(xkv.clone(), true);
  auto w = [](const std::shared_ptr<nn::Linear>& l) { return l->weight.detach(); };
  auto b = [](const std::shared_ptr<nn::Linear>& l) {
    return l->bias.defined() ? l->bias.detach() : Var();
  };
  nn::AttentionOptions opts;
  opts.heads = m.heads;
  opts.keep_probs = true;
  nn::AttentionResult att = nn::multi_head_attention(
      xq_leaf, xkv_leaf,
      {w(m.w_q), b(m.w_q), w(m.w_k), b(m.w_k), w(m.w_v), b(m.w_v), w(m.w_o), b(m.w_o)}, opts);
  Var y = att.out;
  const Tensor& P_all = att.probs;  // (1,H,T,S)
  y.backward(dY);
  c.dxq_engine = to_mat(xq_leaf.grad());
  c.dxkv_engine = to_mat(xkv_leaf.grad());
  c.P_engine = to_mat(P_all.reshape({-1}).slice0(head * T * S, (head + 1) * T * S).reshape({T, S}));

  // By hand, from the same inputs.
  auto W = [](const std::shared_ptr<nn::Linear>& l) { return to_mat(l->weight.data()); };
  auto bias = [](const std::shared_ptr<nn::Linear>& l) {
    return l->bias.defined() ? to_mat(l->bias.data()) : Mat(1, l->weight.size(0));
  };
  const Mat Xq = to_mat(xq), Xkv = to_mat(xkv);
  const Mat Q = hand::linear(Xq, W(m.w_q), bias(m.w_q));   // (T,D)
  const Mat K = hand::linear(Xkv, W(m.w_k), bias(m.w_k));  // (S,D)
  const Mat V = hand::linear(Xkv, W(m.w_v), bias(m.w_v));  // (S,D)
  const Mat dO = hand::matmul(to_mat(dY), W(m.w_o));       // (T,D) x (D,D) -> (T,D)
  Mat dQ(T, Q.cols), dK(S, K.cols), dV(S, V.cols);
  for (int64_t h = 0; h < c.H; ++h) {
    const Mat Qh = hand::columns(Q, h * dk, dk), Kh = hand::columns(K, h * dk, dk),
              Vh = hand::columns(V, h * dk, dk), dOh = hand::columns(dO, h * dk, dk);
    const Mat Z = hand::scaled(hand::matmul(Qh, hand::transpose(Kh)), scale);  // (T,S)
    const Mat P = hand::softmax(Z);                                            // (T,S)
    const Mat dP = hand::matmul(dOh, hand::transpose(Vh));                     // (T,S)
    const Mat dZ = hand::softmax_backward(P, dP);                              // (T,S)
    hand::set_columns(dQ, h * dk, hand::scaled(hand::matmul(dZ, Kh), scale));  // (T,d_k)
    hand::set_columns(dK, h * dk, hand::scaled(hand::matmul(hand::transpose(dZ), Qh), scale));
    hand::set_columns(dV, h * dk, hand::matmul(hand::transpose(P), dOh));  // (S,d_k)
    if (h != head) continue;
    c.P = P;
    c.dO = dOh;
    c.dP = dP;
    Mat dPP = dP;
    for (size_t i = 0; i < dPP.a.size(); ++i) dPP.a[i] *= P.a[i];
    c.rowdot = hand::rowsum(dPP);
    c.dZ = dZ;
    // dZ recomposed (the fused op keeps its own in scratch): this head
    // rebuilt from qkv's primitive ops, the scaled scores keeping their gradient.
    auto tensor = [](const Mat& M) {
      return Tensor::from_vector(std::vector<real>(M.a.begin(), M.a.end()), {M.rows, M.cols});
    };
    Var q_h(tensor(Qh), true), k_h(tensor(Kh), false), v_h(tensor(Vh), false);
    Var z = matmul(q_h, k_h, false, true) * static_cast<real>(scale);  // (T,d_k) x (d_k,S) -> (T,S)
    z.retain_grad();
    Var o = matmul(softmax(z), v_h);  // (T,S) x (S,d_k) -> (T,d_k)
    o.backward(tensor(dOh));
    c.dZ_engine = to_mat(z.grad());
  }
  // Back through the input projections Y = X W^T + b: dX = dY W.
  c.dxq = hand::matmul(dQ, W(m.w_q));                                           // (T,D)
  c.dxkv = hand::plus(hand::matmul(dK, W(m.w_k)), hand::matmul(dV, W(m.w_v)));  // (S,D)
  return c;
}

// ============================================================================
// The engine's backward order
// ============================================================================
// run_backward (autograd/engine.cpp) sorts the graph once with
// topological_order(root) (every variable after the variables its op read)
// and walks that list from the end: each op's node gets the gradient summed
// over the uses of its output, calls its backward, and passes one gradient to
// each input that requires grad; a leaf only collects. Listing the same walk
// spells the backward pass out op by op, as llm.c's gpt2_backward does.
struct BackwardStep {
  std::string op;                     // Node::name(): "add_layer_norm"
  std::string module;                 // Node::module, the module whose forward made the op
                                      // ("decoder.layers.0.norm3"; "" at the top level, and
                                      // always "" unless the forward ran under DetectAnomalyGuard)
  Shape shape;                        // the op's output: the shape of the gradient it receives
  std::vector<std::string> sends_to;  // its inputs that get a gradient, each once:
                                      // "#k" for the op at step k, a leaf's name
};

inline std::vector<BackwardStep> backward_order(const Var& root) {
  const VarList order = topological_order(root);  // the engine's own sort
  std::vector<Var> ops;                           // op outputs, in backward's order
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    if (!it->is_leaf()) ops.push_back(*it);
  auto label = [&](const Var& v) {
    for (size_t k = 0; k < ops.size(); ++k)
      if (ops[k].same_as(v)) return "#" + std::to_string(k + 1);
    return v.name().empty() ? std::string("leaf") : v.name();
  };
  std::vector<BackwardStep> steps;
  for (const Var& v : ops) {
    const Node& node = *v.grad_fn();
    BackwardStep s{node.name(), node.module ? node.module : "", v.shape(), {}};
    for (const Var& in : node.inputs) {
      // An input read twice (self-attention's xq = xkv) gets one summed gradient.
      const std::string to = label(in);
      if (in.requires_grad() &&
          std::find(s.sends_to.begin(), s.sends_to.end(), to) == s.sends_to.end())
        s.sends_to.push_back(to);
    }
    steps.push_back(std::move(s));
  }
  return steps;
}

}  // namespace qkv::step
