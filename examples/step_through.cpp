// step_through: watch a gradient flow, step by step.
//
//   make step                          runs both parts
//   step_through --part 1              the worked attention example only
//   step_through --part 3              one RMSNorm row and one RoPE pair only
//   step_through --order               also list the ops of part 2's model in
//                                      the order the engine's backward visits them
//   step_through --dot graph.dot       also write the Transformer's autograd
//                                      graph, one box per layer (and
//                                      graph.dot.svg if `dot` exists)
//   step_through --dot g.dot --dot-params   the same with every parameter
//                                      drawn as a node of its own
//   step_through --no-fd               skip the finite differences
//   step_through --html page.html      write the gradient explorer page for
//                                      part 1's attention and part 2's model
//                                      (docs/explorer.md); computed in float64
//                                      by build/rel-f64/step_through
//
// Every gradient is printed as qkv's engine computed it ("engine") beside the
// same formula applied by hand ("by hand": plain loops in double in
// examples/by_hand.h, no library kernel) and, where cheap, a finite
// difference. Part 1 follows one query through attention over four keys, the
// worked example of docs/attention-backward.md. Part 2 does the same for a
// real (tiny) Transformer: gradient norms of every parameter, then LayerNorm's
// and attention's backward by hand on the numbers flowing through the model.
// Names as in docs/symbols.md: Z scores, P probabilities, dA = dL/dA.
// The computations live in examples/step_through.h; this file prints them.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/anomaly.h"
#include "autograd/graphviz.h"
#include "explorer/page.h"
#include "explorer/program.h"
#include "io/output_file.h"
#include "io/run_program.h"
#include "trainer/output_paths.h"
#include "examples/step_llama.h"
#include "examples/step_print.h"
#include "examples/step_through.h"

namespace {

using namespace qkv;
using namespace qkv::step;

// ---- Part 1 ------------------------------------------------------------------

void part1_variant(const WorkedExample& ex, bool scaled, bool with_fd) {
  const AttentionPass p = attention_pass(ex, scaled);
  const AttentionByHand h = attention_by_hand(ex, scaled);
  const FiniteDifferences fd = with_fd ? finite_differences(ex, scaled) : FiniteDifferences{};
  auto f = [&](const Mat& m) { return with_fd ? &m : nullptr; };
  const double scale = attention_scale(ex, scaled);
  char buf[160];

  if (scaled)
    section("1b. Scaled: scale = 1/sqrt(d_k) = 1/sqrt(2) = 0.7071");
  else
    section("1a. Unscaled (scale = 1): docs/attention-backward.md's worked check");

  std::printf(" Forward\n");
  Gaps gaps;
  step_row(scaled ? "Z = scale * q K^T" : "Z = q K^T", "scores, one per key", h.Z, p.Z.data(),
           nullptr, gaps);
  step_row("P = softmax(Z)", "", h.P, p.P.data(), nullptr, gaps);
  std::snprintf(buf, sizeof buf, "P = [E, 1, E, 1] / (2E + 2) with E = exp(%s) = %.4f",
                scaled ? "0.7071" : "1", std::exp(scale));
  std::printf("     %s\n", buf);
  step_row("out = P V", "a weighted average of the values", h.out, p.out.data(), nullptr, gaps);

  std::printf("\n Backward from dout = 1 (L = out)\n");
  step_row("dP = dout V^T = V^T", "out = P V, and the matrix rule", h.dP, p.P.grad(), f(fd.P),
           gaps);
  std::snprintf(buf, sizeof buf,
                "softmax backward; here rowsum(dP * P) = sum_j v_j p_j = out = %.4f", h.out(0, 0));
  step_row("dZ = P * (dP - rowsum(dP * P))", buf, h.dZ, p.Z.grad(), f(fd.Z), gaps);
  step_row(scaled ? "dq = scale * dZ K" : "dq = dZ K", scaled ? "Z = scale * q K^T" : "Z = q K^T",
           h.dq, p.q.grad(), f(fd.q), gaps);
  step_row(scaled ? "dK = scale * dZ^T q  (row j: scale * dZ_j q)" : "dK = dZ^T q  (row j: dZ_j q)",
           "q = [1, 0], so only column 0 of K gets gradient", h.dK, p.K.grad(), f(fd.K), gaps);
  step_row("dV = P^T dout = P^T", "out = P V", h.dV, p.V.grad(), f(fd.V), gaps);
  print_gaps(gaps, with_fd);
}

void part1(bool with_fd) {
  banner("Part 1. One query attends over four keys: forward, then backward");
  std::printf(
      " q = [1, 0]                        (1,2)  the query\n"
      " K = [[1,0], [0,1], [1,1], [0,0]]  (4,2)  one key k_j per row\n"
      " V = [[1], [2], [3], [4]]          (4,1)  one value v_j per row\n"
      " out = P V with P = softmax(Z), Z = scale * q K^T.\n"
      " Names as in docs/symbols.md: Z scores, P probabilities, dA = dL/dA,\n"
      " rowsum = the sum over the last axis, * elementwise. Up to three sources:\n"
      "   by hand   plain loops in double (examples/by_hand.h), no qkv kernel\n"
      "   engine    qkv's autograd (float32), read from .grad() after retain_grad()\n");
  if (with_fd)
    std::printf(
        "   fin.diff  nudge one number by +-h in the by-hand forward and take\n"
        "             (out+ - out-) / 2h, h = %g, in double\n",
        hand::kFdStep);
  const WorkedExample ex = worked_example();
  part1_variant(ex, /*scaled=*/false, with_fd);
  part1_variant(ex, /*scaled=*/true, with_fd);
}

// ---- Part 3 ------------------------------------------------------------------

void part3(bool with_fd) {
  banner("Part 3. The llama-style pieces: one RMSNorm row, one RoPE pair");
  const LlamaExample ex = llama_example();
  const LlamaPass p = llama_pass(ex);
  const LlamaByHand h = llama_by_hand(ex, with_fd);
  auto f = [&](const Mat& m) { return with_fd ? &m : nullptr; };
  char buf[160];

  section("3a. RMSNorm (docs/rmsnorm-backward.md), L = sum(y * dy)");
  std::printf(
      " x = [1, 2, 3, 4]   gamma = [1, 0.5, 2, 1]   dy = [1, -1, 0.5, 2]   eps = 1e-6\n"
      " LayerNorm without the mean and without beta.\n");
  Gaps gaps;
  std::snprintf(buf, sizeof buf, "mean(x^2) = 30 / 4 = 7.5, rrms = 1 / sqrt(7.5) = %.4f",
                h.norm.rrms(0, 0));
  step_row("y = x * rrms * gamma", buf, h.norm.y, p.y.data(), nullptr, gaps);
  std::printf("\n Backward from dy\n");
  std::snprintf(buf, sizeof buf, "dxhat = dy * gamma, xhat = x * rrms, mean(dxhat * xhat) = %.4f",
                h.norm.mean_dxhat_xhat(0, 0));
  step_row("dx = rrms * (dxhat - xhat * mean(dxhat * xhat))", buf, h.norm.dx, p.x.grad(), f(h.fd_x),
           gaps);
  step_row("dgamma = dy * xhat", "one row: no sum over rows", h.norm.dgamma, p.gamma.grad(),
           f(h.fd_gamma), gaps);

  section("3b. RoPE (docs/rope-backward.md): one head, d_k = 2, position 1");
  std::printf(
      " x = [3, -1] at position 0 and [1, 2] at position 1; dy = [0.5, 1] and [1, -1].\n"
      " Pair 0 turns by t * theta_0 = t * 10000^0 = t radians: position 1 by a = 1,\n"
      " cos a = %.4f, sin a = %.4f. Position 1's numbers:\n",
      std::cos(1.0), std::sin(1.0));
  step_row("y = [x0 cos a - x1 sin a,  x0 sin a + x1 cos a]", "a rotation R(a)", h.rope.y,
           slice_position_1(p.rotated.data()), nullptr, gaps);
  step_row("dx = [dy0 cos a + dy1 sin a,  -dy0 sin a + dy1 cos a]", "R(a)^T = R(-a): turned back",
           h.rope.dx, slice_position_1(p.pair.grad()), f(h.fd_pair), gaps);
  print_gaps(gaps, with_fd);
}

// ---- Part 2 ------------------------------------------------------------------

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s + "]";
}

void grad_norm_table(const TinyRun& r) {
  const std::vector<ParamGradNorm> rows = param_grad_norms(*r.model);
  std::printf(
      "\n Gradient norm |dL/dp| of every parameter, layer by layer. Bar: log10\n"
      " scale, one # per decade above 1e-8.\n");
  std::string group;
  for (const auto& row : rows) {
    if (row.group != group) {
      group = row.group;
      std::printf("   %s\n", group.c_str());
    }
    const int hashes =
        row.norm > 0 ? std::max(0, static_cast<int>(std::floor(std::log10(row.norm) + 8))) : 0;
    std::printf("     %-24s %-7s %9.2e  %s\n", row.name.c_str(), to_string(row.shape).c_str(),
                row.norm, std::string(static_cast<size_t>(std::min(hashes, 30)), '#').c_str());
  }
  std::printf(
      " The key biases (w_k.bias) get ~0: adding b to every key adds q.b to a\n"
      " whole row of scores, and softmax ignores a shift of its row.\n");
}

void layer_norm_step(const TinyRun& r) {
  const nn::Norm& ln = *r.model->decoder->layers[0]->norm3;
  const Tensor& dy = r.ln_out.grad();  // (1,T,D): the gradient arriving at y
  const LayerNormByHand by_hand =
      layer_norm_by_hand(r.ln_x, dy, ln.weight.data(), ln.bias.data(), ln.eps);
  const hand::LayerNorm& f = by_hand.f;
  const Mat dx_engine = to_mat(r.ln_dx);  // what reached ffn(a), the addend

  section("2b. LayerNorm backward by hand: decoder.layers.0.norm3, row 0");
  std::printf(
      " x = a + ffn(a), the residual sum, made in the same op (add_layer_norm);\n"
      " the sum passes dx unchanged to both a and ffn(a).\n"
      " y = xhat * gamma + beta, xhat = (x - mean) * rstd, rstd = 1/sqrt(var+eps).\n"
      " mean and rstd depend on every x of the row, hence the two extra terms:\n"
      "   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),\n"
      "   dxhat = dy * gamma  (gamma is all ones at initialisation)\n"
      " \"by hand\" recomputes mean, rstd and xhat from the saved x and applies\n"
      " the formula in plain loops (double); \"engine\" is the gradient the\n"
      " autograd graph delivered to ffn(a); \"fin.diff\" nudges one x by +-h\n"
      " (h = %g) and takes the change of sum(dy * y) over 2h.\n",
      hand::kFdStep);
  auto line = [](const char* label, const Mat& m) {
    std::printf("  %-12s %s\n", label, row_text(m, 0).c_str());
  };
  line("x", to_mat(r.ln_x));
  std::printf("  %-12s mean = %.4f, rstd = %.4f\n", "", f.mean(0, 0), f.rstd(0, 0));
  line("xhat", f.xhat);
  line("dy (engine)", to_mat(dy));
  line("dxhat", f.dxhat);
  std::printf("  %-12s mean(dxhat) = %.4f, mean(dxhat * xhat) = %.4f\n", "", f.mean_dxhat(0, 0),
              f.mean_dxhat_xhat(0, 0));
  line("dx by hand", f.dx);
  line("dx engine", dx_engine);
  line("dx fin.diff", by_hand.dx_fd);
  const long long rows = static_cast<long long>(f.dx.rows);
  std::printf(
      "  Over all %lld rows, max |a - b| / max |b|:\n"
      "    dx      by hand vs engine %.1e, by hand vs fin.diff %.1e\n"
      "    dgamma  by hand vs engine %.1e    (colsum(dy * xhat))\n"
      "    dbeta   by hand vs engine %.1e    (colsum(dy))\n",
      rows, relative_gap(f.dx, dx_engine), relative_gap(f.dx, by_hand.dx_fd),
      relative_gap(f.dgamma, to_mat(ln.weight.grad())),
      relative_gap(f.dbeta, to_mat(ln.bias.grad())));
}

void attention_step(const TinyRun& r) {
  const nn::MultiHeadAttention& m = *r.model->decoder->layers[0]->cross_attn;
  const AttentionBackwardCheck c =
      attention_backward_by_hand(m, r.att_q.data(), r.att_kv.data(), r.att_out.grad(), 0);

  section("2c. Attention backward by hand: decoder.layers.0.cross_attn, head 0");
  std::printf(
      " The T = %lld target positions (queries) attend over the S = %lld source\n"
      " positions (keys); d_k = %lld. By hand, in plain loops (double), from the\n"
      " sublayer's inputs, its weights and dY, the gradient at its output:\n"
      "   Z    = Q_h K_h^T / sqrt(d_k),  P = softmax(Z)      (T,S)\n"
      "   dO_h = (dY Wo)[:, head columns]\n"
      "   dP   = dO_h V_h^T                 (T,d_k) x (d_k,S) -> (T,S)\n"
      "   dZ   = P * (dP - rowsum(dP * P))  softmax backward, row by row\n"
      "   dQ_h = dZ K_h / sqrt(d_k), dK_h = dZ^T Q_h / sqrt(d_k), dV_h = P^T dO_h\n",
      static_cast<long long>(c.T), static_cast<long long>(c.S), static_cast<long long>(c.d_k));
  side_by_side("P by hand (T,S)", c.P, "P saved by the engine's fused op", c.P_engine);
  side_by_side("P (T,S)", c.P, "dP (T,S)", c.dP);
  std::printf("   rowsum(dP * P) (T)  %s\n", row_text(hand::transpose(c.rowdot), 0).c_str());
  side_by_side("dZ by hand", c.dZ, "dZ recomposed (qkv's softmax op)", c.dZ_engine);
  std::printf(
      " The fused op keeps its dZ in scratch: \"recomposed\" is this head\n"
      " rebuilt from qkv's matmul and softmax ops on the same Q_h, K_h, V_h, dO_h.\n");
  std::printf(
      "\n Then through the input projections (all heads): dxq = dQ Wq and\n"
      " dxkv = dK Wk + dV Wv, against the fused multi_head_attention backward.\n"
      " By hand vs engine (dZ: vs recomposed), max |a - b| / max |b|:\n"
      "   P %.1e, dZ %.1e, dxq %.1e, dxkv (the encoder output) %.1e\n",
      relative_gap(c.P, c.P_engine), relative_gap(c.dZ, c.dZ_engine),
      relative_gap(c.dxq, c.dxq_engine), relative_gap(c.dxkv, c.dxkv_engine));
}

// Why an untrained model's loss is not ln V. Per position, with z the (V)
// logits and t the target, the loss is lse(z) - z_t, and exactly
//   lse(z) - z_t = ln V + ln(mean(exp(z - mean z))) + (mean z - z_t):
// the uniform guess, the spread of the logits (>= 0, about var(z)/2 when
// small) and how far the target's logit sits below its row's mean.
void loss_above_uniform(const TinyRun& r) {
  const Mat z = to_mat(r.logits.data());  // (T,V)
  const double lnV = std::log(static_cast<double>(z.cols));
  double spread = 0, below = 0, var = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < z.rows; ++i) {
    const int64_t t = r.ex.tgt_out[static_cast<size_t>(i)];
    if (t == 0) continue;  // pad: ignored by the loss
    double mean = 0, e = 0, v = 0;
    for (int64_t j = 0; j < z.cols; ++j) mean += z(i, j) / z.cols;
    for (int64_t j = 0; j < z.cols; ++j) {
      e += std::exp(z(i, j) - mean) / z.cols;
      v += (z(i, j) - mean) * (z(i, j) - mean) / z.cols;
    }
    spread += std::log(e);
    below += mean - z(i, t);
    var += v;
    ++n;
  }
  spread /= n, below /= n, var /= n;
  std::printf(
      " Untrained, a model should score near ln V = ln %lld = %.4f (a uniform\n"
      " guess); this one scores higher because its random logits z are not\n"
      " flat. Per position, exactly, averaged over its %lld positions:\n"
      "   loss   = ln V   + ln(mean(exp(z - mean z))) + (mean z - z_target)\n"
      "   %.4f = %.4f + %.4f (the spread)       + %.4f (chance)\n"
      " The spread is about var(z)/2 = %.4f: lm_head's xavier-random weights on\n"
      " LayerNorm's unit-variance rows give logits of variance %.2f. The last\n"
      " term is this example's luck: its targets' logits sit below the row mean.\n",
      (long long)z.cols, lnV, (long long)n, lnV + spread + below, lnV, spread, below, var / 2, var);
}

void part2(const TinyRun& r) {
  banner("Part 2. A tiny Transformer, one copy example, one backward pass");
  const auto& c = r.cfg;
  std::printf(
      " Seq2SeqTransformer with d_model %lld, %lld heads (d_k %lld), d_ff %lld,\n"
      " %lld encoder and %lld decoder layer, dropout 0, seed %llu: %lld parameters.\n",
      (long long)c.d_model, (long long)c.heads, (long long)(c.d_model / c.heads), (long long)c.d_ff,
      (long long)c.encoder_layers, (long long)c.decoder_layers, (unsigned long long)c.seed,
      (long long)r.model->num_parameters());
  std::printf(
      " Tokens: 0 pad, 1 bos, 2 eos, symbols from 3. Copy the source:\n"
      "   src %-10s tgt_in %-10s tgt_out %s\n",
      ids_text(r.ex.src.ids).c_str(), ids_text(r.ex.tgt_in.ids).c_str(),
      ids_text(r.ex.tgt_out).c_str());
  std::printf(" loss = cross_entropy(logits %s, tgt_out) = %.4f\n",
              to_string(r.logits.shape()).c_str(), static_cast<double>(r.loss.item()));
  loss_above_uniform(r);
  section("2a. Gradient norms");
  grad_norm_table(r);
  layer_norm_step(r);
  attention_step(r);
}

// A leaf's name as seen from the op's module: "decoder.layers.0.norm3.weight"
// read by an op of "decoder.layers.0.norm3" is "weight".
std::string relative_name(const std::string& name, const std::string& module) {
  if (!module.empty() && name.rfind(module + ".", 0) == 0) return name.substr(module.size() + 1);
  return name;
}

// Part 2's backward, op by op, in the engine's order (the modules come from
// the forward having run under DetectAnomalyGuard, which main turns on).
void print_backward_order(const TinyRun& r) {
  const std::vector<BackwardStep> steps = backward_order(r.loss);
  section("The engine's backward order (part 2's model)");
  std::printf(
      " loss.backward() sorts the graph once, topological_order(loss) in\n"
      " autograd/engine.cpp, and walks it from the end: each op below runs its\n"
      " backward once, with the gradient summed over every use of its output,\n"
      " and sends a gradient to each input after \"->\" (#k: the op of step k,\n"
      " which runs later; a name: a parameter, whose .grad() collects it).\n"
      " Columns: step, op, output shape (= its gradient's), the module that\n"
      " made it.\n\n");
  for (size_t k = 0; k < steps.size(); ++k) {
    const BackwardStep& s = steps[k];
    std::printf("  %2zu. %-22s %-8s %s\n", k + 1, s.op.c_str(), to_string(s.shape).c_str(),
                s.module.empty() ? "(top level)" : s.module.c_str());
    std::string to = "        ->";
    for (size_t i = 0; i < s.sends_to.size(); ++i) {
      const std::string item =
          " " + relative_name(s.sends_to[i], s.module) + (i + 1 < s.sends_to.size() ? "," : "");
      if (to.size() + item.size() > 78) {
        std::printf("%s\n", to.c_str());
        to = "          ";
      }
      to += item;
    }
    std::printf("%s\n", to.c_str());
  }
  std::printf(" %zu ops. Parameter names are relative to the op's module.\n", steps.size());
}

// The graph of part 2's pass. Its module boxes come from the paths
// nn::ModuleScope records while detect-anomaly mode is on (main turns it on
// for the pass it draws).
void write_graph(const TinyRun& r, const std::string& path, const DotOptions& options) {
  std::ostringstream dot;
  write_dot(r.loss, dot, options);
  write_file_atomically(path, "--dot " + brief(path), dot.str());
  section("The autograd graph");
  std::printf(
      " Wrote %s: part 2's graph of %zu variables,\n"
      " one box per layer; each op shows the module that made it, its shape\n"
      " and its gradient norm, and arrows follow the forward pass.\n",
      path.c_str(), topological_order(r.loss).size());
  std::fputs(options.show_parameters
                 ? " Every parameter is a node of its own (--dot-params).\n"
                 : " Each op lists the parameters it reads (--dot-params draws them\n"
                   " as nodes of their own).\n",
             stdout);
  // Graphviz runs without a shell (io/run_program.h); its SVG is written
  // beside the DOT file by the same atomic writer.
  const std::string program = find_program("dot");
  if (!program.empty()) {
    const std::string svg = path + ".svg";
    const ProgramRun g = run_program({program, "-Tsvg", path.front() == '-' ? "./" + path : path});
    if (g.status == 0) {
      write_file_atomically(svg, "--dot " + brief(svg), g.out);
      std::printf(" Rendered %s with Graphviz (dot -Tsvg).\n", svg.c_str());
    } else {
      std::printf(" `dot -Tsvg %s` failed with status %d: %s\n", path.c_str(), g.status,
                  brief(g.err).c_str());
    }
  } else {
    std::printf(
        " Graphviz `dot` is not installed. To render: apt-get install graphviz,\n"
        " then dot -Tsvg %s -o %s.svg\n",
        path.c_str(), path.c_str());
  }
}

// ---- The explorer page: --html ---------------------------------------------------

// Token labels: 0 pad, 1 bos, 2 eos, symbols from 3 as their numbers.
std::vector<std::string> token_labels(const std::vector<int64_t>& ids) {
  std::vector<std::string> out;
  for (int64_t id : ids)
    out.push_back(id == 0 ? "pad" : id == 1 ? "bos" : id == 2 ? "eos" : std::to_string(id));
  return out;
}

explorer::Trace part1_trace() {
  const WorkedExample ex = worked_example();
  Var q = Var(ex.q.clone(), true).set_name("q");
  Var K = Var(ex.K.clone(), true).set_name("K");
  Var V = Var(ex.V.clone(), true).set_name("V");
  const real scale = static_cast<real>(attention_scale(ex, /*scaled=*/true));
  explorer::TraceOptions opt;
  opt.title = "Part 1: one query over four keys";
  opt.description =
      "q = [1, 0] attends over the keys K = [[1,0],[0,1],[1,1],[0,0]] with values V = "
      "[1,2,3,4]: Z = scale * q K^T (matmul, then mul_scalar with scale = 1/sqrt(2)), P = "
      "softmax(Z), out = P V, and L = out. Backward starts from dL/dout = 1.";
  opt.show_leaves = true;  // q, K and V drawn as nodes of their own
  return explorer::record_trace(
      [&] { return matmul(softmax(matmul(q, K, false, /*trans_b=*/true) * scale), V); }, nullptr,
      opt);
}

explorer::Trace part2_trace() {
  const CopyExample ex = copy_example();
  nn::Seq2SeqTransformer model(tiny_config());
  model.eval();
  const std::vector<std::string> src = token_labels(ex.src.ids), tgt = token_labels(ex.tgt_in.ids);
  explorer::TraceOptions opt;
  opt.title = "Part 2: a 1+1-layer Transformer";
  opt.description =
      "An encoder-decoder (d_model 8, 2 heads, d_ff 16, seed 1) copies src [3 4 5]: the decoder "
      "reads tgt_in [bos 3 4 5] and is scored on tgt_out [3 4 5 eos] with cross-entropy. "
      "Tokens: 0 pad, 1 bos, 2 eos, symbols from 3.";
  opt.attention_tokens = [&](const std::string& module, int64_t, int64_t) {
    if (module.find("cross_attn") != std::string::npos) return explorer::AttentionAxes{tgt, src};
    if (module.rfind("encoder", 0) == 0) return explorer::AttentionAxes{src, src};
    return explorer::AttentionAxes{tgt, tgt};
  };
  return explorer::record_trace(
      [&] {
        return nn::cross_entropy(model.forward(ex.src, ex.tgt_in), ex.tgt_out, /*ignore_index=*/0);
      },
      &model, opt);
}

void write_html(const std::string& path, const std::string& command) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<explorer::Trace> traces{part1_trace(), part2_trace()};
  explorer::PageOptions page;
  page.title = "qkv gradient explorer: the step-through";
  page.command = command;
  page.docs_base = explorer::docs_url_beside_build();
  explorer::write_page(traces, path, page);
  std::error_code ec;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("Wrote %s (%.0f KB in %.2f s; every number in %s):\n", path.c_str(),
              std::filesystem::file_size(path, ec) / 1024.0, secs, explorer::precision_name());
  for (const auto& t : traces)
    std::printf("  %-36s %3zu ops, %4lld finite-difference checks, %lld fail, max rel err %.1e\n",
                t.title.c_str(), t.ops, (long long)t.fd_checked, (long long)t.fd_failed,
                t.fd_max_rel_err);
  for (const auto& t : traces)
    if (t.fd_failed) throw Error("finite-difference checks failed in '" + t.title + "'");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"step_through: watch a gradient flow through attention and a tiny Transformer"};
  std::string part = "all", dot_path;
  bool no_fd = false, order = false;
  app.add_option("--part", part, "1, 2, 3 or all (default)")
      ->type_name("N")
      ->check(CLI::Validator(
          [](std::string& s) {
            return s == "1" || s == "2" || s == "3" || s == "all"
                       ? std::string()
                       : "expected 1, 2, 3 or all, got '" + qkv::brief(s) + "'";
          },
          "N", "part"));
  app.add_flag("--order", order,
               "list the ops of part 2's model in the order the engine's backward visits them");
  CLI::Option* dot =
      app.add_option("--dot", dot_path, "write part 2's autograd graph (Graphviz DOT)")
          ->type_name("PATH");
  DotOptions dot_options;
  app.add_flag("--dot-params", dot_options.show_parameters,
               "with --dot: draw every parameter as a node of its own")
      ->needs(dot);
  app.add_flag("--no-fd", no_fd, "skip the finite differences of parts 1 and 3");
  std::string html_path;
  app.add_option("--html", html_path,
                 "write the gradient explorer page (one HTML file) for parts 1 and 2 instead of "
                 "the printout")
      ->type_name("PATH");
  app.footer(
      "Output files (--dot, the .svg Graphviz makes beside it, --html): a symlink is\n"
      "written through to its file and stays a link; a device, FIFO, socket or\n"
      "dangling symlink is refused (docs/reliability.md#output-paths).");
  CLI11_PARSE(app, argc, argv);

  try {
    if (!dot_path.empty()) {  // before any work: the graph and the SVG Graphviz makes of it
      outputs::check_file_path("--dot", dot_path);
      outputs::check_file_path("--dot", dot_path + ".svg");
    }
    if (!html_path.empty()) {
      outputs::check_file_path("--html", html_path);
      explorer::run_in_float64("--html", argv);
      std::string command = "step_through";
      for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
      write_html(html_path, command);
      return 0;
    }
    if (part == "1" || part == "all") part1(!no_fd);
    const bool draw = !dot_path.empty();
    if (part == "2" || part == "all" || draw || order) {
      const TinyRun r = [&] {
        // Detect-anomaly mode records in each op the module that made it
        // (Node::module), which the drawing boxes by and the order names;
        // it changes no number.
        DetectAnomalyGuard record_modules(draw || order);
        return run_tiny_transformer(/*retain_all=*/draw);
      }();
      if (part == "2" || part == "all") part2(r);
      if (order) print_backward_order(r);
      if (draw) write_graph(r, dot_path, dot_options);
    }
    if (part == "3" || part == "all") part3(!no_fd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_through: %s\n", e.what());
    return 1;
  }
  return 0;
}
