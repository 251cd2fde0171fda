// The computations behind examples/step_through.cpp, the program that walks a
// learner through one gradient, step by step. The program prints what these
// functions return; tests/test_step_through.cpp checks the same numbers.
//
// Part 1: single-query attention on a worked example, through qkv's own
//   autograd (every intermediate keeps its gradient with retain_grad), next to
//   central finite differences of the scalar output.
// Part 2: a tiny Transformer on one copy example. Parameter gradient norms,
//   and two backward formulas applied to the real numbers and compared with
//   the engine: LayerNorm's dx (the library's own kernel, called directly,
//   beside finite differences) and attention's softmax dS (by hand).
#pragma once
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
#include "core/matmul.h"
#include "core/reduce.h"
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

// One forward and backward pass through qkv's autograd. Every intermediate
// calls retain_grad(), so after out.backward() each .grad() holds dL/d(it)
// exactly as the engine computed it, with L = out.
struct AttentionPass {
  real scale = 1;  // 1/sqrt(d_k), or 1 for the unscaled variant
  Var q, K, V;     // leaves (1,2), (4,2), (4,1)
  Var s;           // scores       q K^T      (1,2) x (2,4) -> (1,4)
  Var z;           // scaled       s * scale  (1,4); the same Var as s when unscaled
  Var w;           // weights      softmax(z) (1,4)
  Var out;         // output       w V        (1,4) x (4,1) -> (1,1)
};

inline AttentionPass attention_pass(const WorkedExample& ex, bool scaled) {
  AttentionPass p;
  const int64_t d_k = ex.q.size(1);
  p.scale = scaled ? real(1) / std::sqrt(static_cast<real>(d_k)) : real(1);
  p.q = Var(ex.q.clone(), true).set_name("q");
  p.K = Var(ex.K.clone(), true).set_name("K");
  p.V = Var(ex.V.clone(), true).set_name("V");
  p.s = matmul(p.q, p.K, false, /*trans_b=*/true);
  p.z = scaled ? p.s * p.scale : p.s;
  p.w = softmax(p.z);
  p.out = matmul(p.w, p.V);
  for (Var* v : {&p.s, &p.z, &p.w}) v->retain_grad();
  p.out.backward();  // dL/dout = 1
  return p;
}

// The scalar output as a function of one stage's value, everything upstream of
// that stage held fixed. Finite differences nudge the argument.
using ScalarFn = std::function<real(const Tensor&)>;

inline real out_from_w(const Tensor& w, const Tensor& V) { return matmul(w, V).item(); }
inline real out_from_z(const Tensor& z, const Tensor& V) { return out_from_w(softmax(z), V); }
inline real out_from_s(const Tensor& s, const Tensor& V, real scale) {
  return out_from_z(scale == 1 ? s : mul(s, scale), V);
}
inline real out_from_qkv(const Tensor& q, const Tensor& K, const Tensor& V, real scale) {
  return out_from_s(matmul(q, K, false, true), V, scale);  // (1,2) x (2,4) -> (1,4)
}

// Central differences: dF/dx_i ~ (F(x + h e_i) - F(x - h e_i)) / 2h.
inline Tensor central_difference(const ScalarFn& F, const Tensor& x, real h) {
  Tensor g = Tensor::empty(x.shape());
  Tensor xp = x.clone();
  real* p = xp.data();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const real orig = p[i];
    p[i] = orig + h;
    const double up = F(xp);
    p[i] = orig - h;
    const double down = F(xp);
    p[i] = orig;
    g.data()[i] = static_cast<real>((up - down) / (2.0 * h));
  }
  return g;
}

// float32 has ~7 digits: a larger step keeps rounding out of the quotient
// (error ~ h^2 f''' from truncation, ~ 1e-7 / h from rounding).
inline constexpr real kFdStep = sizeof(real) == 4 ? real(1e-2) : real(1e-6);

// Finite-difference gradients of out with respect to every stage of a pass.
struct FiniteDifferences {
  Tensor w, z, s, q, K, V;
};

inline FiniteDifferences finite_differences(const AttentionPass& p, real h = kFdStep) {
  const Tensor q = p.q.data(), K = p.K.data(), V = p.V.data();
  const real sc = p.scale;
  FiniteDifferences fd;
  fd.w = central_difference([&](const Tensor& w) { return out_from_w(w, V); }, p.w.data(), h);
  fd.z = central_difference([&](const Tensor& z) { return out_from_z(z, V); }, p.z.data(), h);
  fd.s = central_difference([&](const Tensor& s) { return out_from_s(s, V, sc); }, p.s.data(), h);
  fd.q = central_difference([&](const Tensor& x) { return out_from_qkv(x, K, V, sc); }, q, h);
  fd.K = central_difference([&](const Tensor& x) { return out_from_qkv(q, x, V, sc); }, K, h);
  fd.V = central_difference([&](const Tensor& x) { return out_from_qkv(q, K, x, sc); }, V, h);
  return fd;
}

// The hand derivation, evaluated from the forward values alone (no engine):
//   out = sum_j w_j v_j                     =>  dL/dw_j = v_j
//   w = softmax(z)                          =>  dL/dz = w * (dL/dw - sum(w * dL/dw))
//   z = scale * s                           =>  dL/ds = scale * dL/dz
//   s_j = q . k_j                           =>  dL/dq = sum_j dL/ds_j k_j,  dL/dk_j = dL/ds_j q
//   out = sum_j w_j v_j                     =>  dL/dv_j = w_j
struct HandGradients {
  Tensor w, z, s, q, K, V;
};

inline HandGradients hand_gradients(const AttentionPass& p) {
  const Tensor& w = p.w.data();  // (1,4)
  const Tensor& q = p.q.data();  // (1,2)
  const Tensor& K = p.K.data();  // (4,2)
  const Tensor& V = p.V.data();  // (4,1)
  const int64_t n = K.size(0), d = K.size(1);
  HandGradients g;
  g.w = V.clone().reshape({1, n});  // dL/dw_j = v_j
  double wdw = 0;                   // sum_j w_j dL/dw_j (= out)
  for (int64_t j = 0; j < n; ++j) wdw += double(w.data()[j]) * g.w.data()[j];
  g.z = Tensor::empty({1, n});
  for (int64_t j = 0; j < n; ++j)
    g.z.data()[j] = static_cast<real>(w.data()[j] * (g.w.data()[j] - wdw));
  g.s = mul(g.z, p.scale);
  g.q = Tensor::zeros({1, d});
  g.K = Tensor::empty({n, d});
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < d; ++c) {
      g.q.data()[c] += g.s.data()[j] * K.data()[j * d + c];
      g.K.data()[j * d + c] = g.s.data()[j] * q.data()[c];
    }
  g.V = w.clone().reshape({n, 1});  // dL/dv_j = w_j
  return g;
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
//   decoder.layers.0.norm3       x = h + ffn(h)  ->  y = layer_norm(x), one op:
//                                add_layer_norm(h, ffn(h)) makes the sum in its row pass
//                                and hands dx to both addends (d(h + f)/df = 1)
//   decoder.layers.0.cross_attn  (h, memory)     ->  multi_head_attention
// retain_all keeps every intermediate gradient (for the DOT drawing).
struct TinyRun {
  nn::TransformerConfig cfg;
  CopyExample ex;
  std::shared_ptr<nn::Seq2SeqTransformer> model;
  Var logits;                  // (B,T,V) = (1,4,8)
  Var loss;                    // ()
  Var ln_a, ln_b, ln_out;      // norm3's addends h and ffn(h), and its output y, (1,4,8)
  Tensor ln_x, ln_dx;          // norm3's normalised input x = h + ffn(h), and dL/dx (1,4,8)
  Var att_q, att_kv, att_out;  // cross_attn's inputs (1,4,8), (1,3,8) and output (1,4,8)
};

inline TinyRun run_tiny_transformer(bool retain_all = false) {
  TinyRun r;
  r.cfg = tiny_config();
  r.ex = copy_example();
  r.model = std::make_shared<nn::Seq2SeqTransformer>(r.cfg);
  r.model->keep_attention(true);  // cross-attention P stays readable: last_attention()
  for (auto& np : r.model->named_parameters()) np.second.set_name(np.first);  // for the graph labels
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
  // ffn(h) feeds only the sum, so the gradient it receives is dL/dx itself
  // (h's own gradient also has what flowed back through ffn).
  r.ln_dx = r.ln_b.grad();
  return r;
}

// One row of the parameter-gradient table.
struct ParamGradNorm {
  std::string group;  // "encoder.layers.0", or the first name component ("src_embed")
  std::string name;   // the rest ("self_attn.w_q.weight")
  Shape shape;
  double norm = 0;    // Frobenius norm of .grad() (0 when no gradient arrived)
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

// ---- LayerNorm backward, by the library's formula ----------------------------
// y = xhat * gamma + beta with xhat = (x - mean) * rstd, rstd = 1/sqrt(var + eps).
// Differentiating through mean and rstd (both depend on every x of the row):
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),  dxhat = dy * gamma
// That formula is nn::layernorm_backward (nn/layernorm.cpp), the kernel the
// engine's add_layer_norm node runs. Here it is called directly on norm3's
// numbers, outside the graph, after nn::layernorm_forward for each row's mean
// and rstd; finite differences check it independently of any formula.
struct LayerNormByFormula {
  Tensor mean, rstd;       // (N) each, from nn::layernorm_forward
  Tensor dx;               // x's shape (..., D), from nn::layernorm_backward
  Tensor dgamma, dbeta;    // (D), from the same call
  Tensor dx_fd;            // x's shape: central differences (undefined without fd)
  // Row 0's pieces of the formula, for printing, in double from the kernel's
  // mean and rstd: xhat and dxhat (D) and the two row means.
  std::vector<double> xhat, dxhat;
  double mean_dxhat = 0, mean_dxhat_xhat = 0;
};

// sum(dy * layer_norm(x)) with dy held fixed: its gradient in x is exactly the
// dx that layer_norm's backward gives for dy (the rest of the model only
// enters through dy), so finite differences of it check that dx.
inline real layer_norm_dot(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                           const Tensor& beta, real eps) {
  const int64_t D = gamma.numel(), N = x.numel() / D;
  Tensor y = Tensor::empty(x.shape()), mean = Tensor::empty({N}), rstd = Tensor::empty({N});
  nn::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(),
                        N, D, eps);
  double s = 0;
  for (int64_t i = 0; i < x.numel(); ++i) s += double(dy.data()[i]) * y.data()[i];
  return static_cast<real>(s);
}

// x, dy (..., D): the rows LayerNorm normalised and the gradient at its output.
inline LayerNormByFormula layer_norm_by_formula(const Tensor& x, const Tensor& dy,
                                                const Tensor& gamma, const Tensor& beta,
                                                real eps, bool with_fd = true) {
  const int64_t D = gamma.numel();
  if (x.dim() < 1 || x.shape() != dy.shape() || x.size(-1) != D || beta.shape() != gamma.shape())
    throw Error("layer_norm_by_formula: x " + to_string(x.shape()) + ", dy " +
                to_string(dy.shape()) + ", gamma " + to_string(gamma.shape()) + ", beta " +
                to_string(beta.shape()));
  const int64_t N = x.numel() / D;
  LayerNormByFormula f;
  Tensor y = Tensor::empty(x.shape());  // not shown: the model's own forward made it
  f.mean = Tensor::empty({N});
  f.rstd = Tensor::empty({N});
  nn::layernorm_forward(y.data(), f.mean.data(), f.rstd.data(), x.data(), gamma.data(),
                        beta.data(), N, D, eps);
  f.dx = Tensor::empty(x.shape());
  f.dgamma = Tensor::empty({D});
  f.dbeta = Tensor::empty({D});
  nn::layernorm_backward(f.dx.data(), f.dgamma.data(), f.dbeta.data(), dy.data(), x.data(),
                         gamma.data(), f.mean.data(), f.rstd.data(), N, D);
  if (with_fd)
    f.dx_fd = central_difference(
        [&](const Tensor& xx) { return layer_norm_dot(xx, dy, gamma, beta, eps); }, x, kFdStep);

  // Row 0, spelled out from the definitions.
  const double m = f.mean.data()[0], s = f.rstd.data()[0];
  for (int64_t j = 0; j < D; ++j) {
    f.xhat.push_back((x.data()[j] - m) * s);
    f.dxhat.push_back(double(dy.data()[j]) * gamma.data()[j]);
    f.mean_dxhat += f.dxhat[j] / D;
    f.mean_dxhat_xhat += f.dxhat[j] * f.xhat[j] / D;
  }
  return f;
}

// ---- Attention backward by hand ----------------------------------------------------
// Columns [c0, c0 + n) of a (rows, D) matrix, copied out: one head's block.
inline Tensor column_block(const Tensor& X, int64_t c0, int64_t n) {
  const int64_t rows = X.size(0), D = X.size(1);
  Tensor out = Tensor::empty({rows, n});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < n; ++c) out.data()[i * n + c] = X.data()[i * D + c0 + c];
  return out;
}

// y = x W^T + b on a (N, in) matrix.
inline Tensor project(const Tensor& x, const nn::Linear& l) {
  Tensor y = matmul(x, l.weight.data(), false, true);  // (N,in) x (in,out) -> (N,out)
  return l.bias.defined() ? add(y, l.bias.data()) : y;
}

// The attention sublayer re-run on its captured inputs (one sequence, B = 1),
// then its backward traced by hand for head `head` and checked against qkv:
//   dO   = dY Wo                       (T,D): gradient of the concatenated heads
//   dP   = dO_h V_h^T                  (T,d_k) x (d_k,S) -> (T,S)
//   dS   = P * (dP - rowsum(dP * P))   softmax backward, row by row
//   dQ_h = scale dS K_h,  dK_h = scale dS^T Q_h,  dV_h = P^T dO_h
//   dx_q = dQ Wq,  dx_kv = dK Wk + dV Wv
struct AttentionBackwardCheck {
  int64_t T = 0, S = 0, H = 0, d_k = 0, head = 0;
  Tensor P;          // (T,S) this head's probabilities, saved by the fused forward
  Tensor dO;         // (T,d_k) this head's block of dY Wo
  Tensor dP;         // (T,S)
  Tensor rowdot;     // (T) rowsum(dP * P)
  Tensor dS;         // (T,S) by the formula
  Tensor dS_engine;  // (T,S) from qkv's softmax op: the head rebuilt from primitive ops
  Tensor dxq, dxkv;                // (T,D), (S,D) by the formulas, all heads
  Tensor dxq_engine, dxkv_engine;  // the fused multi_head_attention backward
};

inline AttentionBackwardCheck attention_backward_by_hand(const nn::MultiHeadAttention& m,
                                                         const Tensor& xq, const Tensor& xkv,
                                                         const Tensor& dY, int64_t head) {
  if (xq.dim() != 3 || xq.size(0) != 1 || xkv.dim() != 3 || xkv.size(0) != 1 ||
      dY.shape() != xq.shape() || head < 0 || head >= m.heads)
    throw Error("attention_backward_by_hand: needs B = 1 and 0 <= head < H; got xq " +
                to_string(xq.shape()) + ", xkv " + to_string(xkv.shape()) + ", dY " +
                to_string(dY.shape()) + ", head " + std::to_string(head));
  AttentionBackwardCheck c;
  c.T = xq.size(1);
  c.S = xkv.size(1);
  c.H = m.heads;
  c.d_k = m.d_k;
  c.head = head;
  const int64_t T = c.T, S = c.S, D = m.d_model, dk = c.d_k;
  const real scale = real(1) / std::sqrt(static_cast<real>(dk));

  // The engine: the fused op on fresh leaves, weights detached so that the
  // model's own parameter gradients are left untouched.
  Var xq_leaf(xq.clone(), true), xkv_leaf(xkv.clone(), true);
  auto w = [](const std::shared_ptr<nn::Linear>& l) { return l->weight.detach(); };
  auto b = [](const std::shared_ptr<nn::Linear>& l) { return l->bias.defined() ? l->bias.detach() : Var(); };
  Tensor P_all;  // (1,H,T,S)
  Var y = nn::multi_head_attention(xq_leaf, xkv_leaf, w(m.w_q), b(m.w_q), w(m.w_k), b(m.w_k),
                                   w(m.w_v), b(m.w_v), w(m.w_o), b(m.w_o), m.heads, {}, &P_all);
  y.backward(dY);
  c.dxq_engine = xq_leaf.grad().reshape({T, D});
  c.dxkv_engine = xkv_leaf.grad().reshape({S, D});

  // By hand, from the same numbers.
  const Tensor Xq = xq.reshape({T, D}), Xkv = xkv.reshape({S, D});
  const Tensor Q = project(Xq, *m.w_q), K = project(Xkv, *m.w_k), V = project(Xkv, *m.w_v);
  const Tensor dO = matmul(dY.reshape({T, D}), m.w_o->weight.data());  // (T,D) x (D,D) -> (T,D)
  Tensor dQ = Tensor::empty({T, D}), dK = Tensor::empty({S, D}), dV = Tensor::empty({S, D});
  for (int64_t h = 0; h < c.H; ++h) {
    Tensor P = Tensor::empty({T, S});
    for (int64_t i = 0; i < T * S; ++i) P.data()[i] = P_all.data()[h * T * S + i];
    const Tensor Qh = column_block(Q, h * dk, dk), Kh = column_block(K, h * dk, dk),
                 Vh = column_block(V, h * dk, dk), dOh = column_block(dO, h * dk, dk);
    const Tensor dP = matmul(dOh, Vh, false, true);  // (T,d_k) x (d_k,S) -> (T,S)
    Tensor rowdot = Tensor::zeros({T}), dS = Tensor::empty({T, S});
    for (int64_t i = 0; i < T; ++i) {
      double dot = 0;
      for (int64_t j = 0; j < S; ++j) dot += double(dP.data()[i * S + j]) * P.data()[i * S + j];
      rowdot.data()[i] = static_cast<real>(dot);
      for (int64_t j = 0; j < S; ++j)
        dS.data()[i * S + j] = static_cast<real>(P.data()[i * S + j] * (dP.data()[i * S + j] - dot));
    }
    const Tensor dQh = mul(matmul(dS, Kh), scale);               // (T,S) x (S,d_k) -> (T,d_k)
    const Tensor dKh = mul(matmul(dS, Qh, true, false), scale);  // (S,T) x (T,d_k) -> (S,d_k)
    const Tensor dVh = matmul(P, dOh, true, false);              // (S,T) x (T,d_k) -> (S,d_k)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t k = 0; k < dk; ++k) dQ.data()[i * D + h * dk + k] = dQh.data()[i * dk + k];
    for (int64_t j = 0; j < S; ++j)
      for (int64_t k = 0; k < dk; ++k) {
        dK.data()[j * D + h * dk + k] = dKh.data()[j * dk + k];
        dV.data()[j * D + h * dk + k] = dVh.data()[j * dk + k];
      }
    if (h == head) {
      c.P = P;
      c.dO = dOh;
      c.dP = dP;
      c.rowdot = rowdot;
      c.dS = dS;
      // The engine's dS: rebuild this head from primitive ops and keep the
      // gradient of the scaled scores.
      Var q_h(Qh, true), k_h(Kh, false), v_h(Vh, false);
      Var z = matmul(q_h, k_h, false, true) * scale;  // (T,d_k) x (d_k,S) -> (T,S)
      z.retain_grad();
      Var o = matmul(softmax(z), v_h);  // (T,S) x (S,d_k) -> (T,d_k)
      o.backward(dOh);
      c.dS_engine = z.grad();
    }
  }
  // Back through the input projections y = x W^T + b: dx = dy W.
  c.dxq = matmul(dQ, m.w_q->weight.data());                                   // (T,D) x (D,D)
  c.dxkv = add(matmul(dK, m.w_k->weight.data()), matmul(dV, m.w_v->weight.data()));  // (S,D)
  return c;
}

}  // namespace qkv::step
