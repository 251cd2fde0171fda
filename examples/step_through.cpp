// step_through: watch a gradient flow, step by step.
//
//   make step                          runs both parts
//   step_through --part 1              the worked attention example only
//   step_through --dot graph.dot       also write the Transformer's autograd
//                                      graph, one box per layer (and
//                                      graph.dot.svg if `dot` exists)
//   step_through --dot g.dot --dot-params   the same with every parameter
//                                      drawn as a node of its own
//   step_through --no-fd               skip the finite differences
//
// Part 1 follows one query through attention over four keys, forward and then
// backward, printing every intermediate's gradient as qkv's engine computed
// it, the hand formula that predicts it, and a finite-difference check.
// Part 2 does the same for a real (tiny) Transformer: gradient norms of every
// parameter, then the LayerNorm backward formula (the library's own kernel,
// called directly) and the softmax backward formula (by hand) applied to the
// numbers flowing through the model, compared with the engine.
// The computations live in examples/step_through.h; this file prints them.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "autograd/anomaly.h"
#include "autograd/graphviz.h"
#include "trainer/output_paths.h"
#include "examples/step_through.h"

namespace {

using namespace qkv;
using namespace qkv::step;

// ---- printing: every line fits an 80-column terminal -------------------------

void banner(const std::string& title) {
  const std::string bar(78, '=');
  std::printf("\n%s\n %s\n%s\n", bar.c_str(), title.c_str(), bar.c_str());
}

void section(const std::string& title) {
  std::string line = "--- " + title + " ";
  if (line.size() < 78) line += std::string(78 - line.size(), '-');
  std::printf("\n%s\n", line.c_str());
}

// One row of numbers: "[ 0.3655 -0.1345]".
std::string row_text(const real* p, int64_t n, int prec) {
  std::string s = "[";
  char buf[32];
  for (int64_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%*.*f", prec + 3, prec, static_cast<double>(p[i]) + 0.0);  // + 0.0: no "-0.0000"
    s += (i ? " " : "") + std::string(buf);
  }
  return s + "]";
}

// A tensor as lines of rows (its last dimension across, the rest down).
std::vector<std::string> rows_of(const Tensor& t, int prec) {
  const int64_t cols = t.dim() == 0 ? 1 : t.size(-1);
  std::vector<std::string> lines;
  for (int64_t r = 0; r < t.numel() / std::max<int64_t>(cols, 1); ++r)
    lines.push_back(row_text(t.data() + r * cols, cols, prec));
  return lines;
}

// "   label              (1,4)  [ ... ]" (further rows aligned below).
void show(const std::string& label, const Tensor& t, int prec = 4) {
  const std::vector<std::string> lines = rows_of(t, prec);
  for (size_t i = 0; i < lines.size(); ++i)
    std::printf("   %-22s %-7s %s\n", i ? "" : label.c_str(),
                i ? "" : to_string(t.shape()).c_str(), lines[i].c_str());
}

// One gradient from several sources (the hand formula, the engine, a finite
// difference): side by side when the columns fit in 80, else one above the other.
using Column = std::pair<std::string, const Tensor*>;
void compare(const std::vector<Column>& cols, int prec = 4) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : cols) rows.push_back(rows_of(*c.second, prec));
  const std::string shape = to_string(cols[0].second->shape());
  const size_t width = rows[0][0].size();
  if (14 + cols.size() * (width + 3) <= 80) {
    std::string head = "     " + std::string(7, ' ');
    for (size_t k = 0; k < cols.size(); ++k)
      head += " " + (k + 1 < cols.size() ? cols[k].first + std::string(width + 2 - cols[k].first.size(), ' ') : cols[k].first);
    std::printf("%s\n", head.c_str());
    for (size_t i = 0; i < rows[0].size(); ++i) {
      std::printf("     %-7s", i ? "" : shape.c_str());
      for (size_t k = 0; k < rows.size(); ++k) std::printf(" %s%s", rows[k][i].c_str(), k + 1 < rows.size() ? "  " : "");
      std::printf("\n");
    }
    return;
  }
  for (size_t k = 0; k < cols.size(); ++k)
    for (size_t i = 0; i < rows[k].size(); ++i)
      std::printf("     %-7s %-8s %s\n", i || k ? "" : shape.c_str(), i ? "" : cols[k].first.c_str(),
                  rows[k][i].c_str());
}

// ---- Part 1 ------------------------------------------------------------------

// Largest gaps seen so far: engine vs the hand formula, engine vs finite differences.
struct Gaps {
  double formula = 0, fd = 0;
};

// One gradient: the formula, a remark, then its value by the formula (computed
// by hand in plain loops), by the engine and by finite differences.
void grad_step(const std::string& formula, const std::string& why, const Tensor& hand, const Tensor& engine,
               const Tensor* fd, Gaps& gaps) {
  std::printf("\n   %s\n", formula.c_str());
  if (!why.empty()) std::printf("     (%s)\n", why.c_str());
  std::vector<Column> cols{{"formula", &hand}, {"engine", &engine}};
  if (fd) cols.push_back({"fin.diff", fd});
  compare(cols);
  gaps.formula = std::max(gaps.formula, max_abs_diff(engine, hand));
  if (fd) gaps.fd = std::max(gaps.fd, max_abs_diff(engine, *fd));
}

void part1_variant(const WorkedExample& ex, bool scaled, bool with_fd) {
  const AttentionPass p = attention_pass(ex, scaled);
  const FiniteDifferences fd = with_fd ? finite_differences(p) : FiniteDifferences{};
  auto f = [&](const Tensor& t) { return with_fd ? &t : nullptr; };
  char buf[128];

  if (scaled)
    section("1a. Scaled: z = s / sqrt(d_k), d_k = 2, scale = 0.7071");
  else
    section("1b. Unscaled: z = s (scale 1)");

  std::printf(" Forward (each intermediate, its shape, its value)\n");
  show("s   = q K^T", p.s.data());
  if (scaled) show("z   = s * scale", p.z.data());
  show(scaled ? "w   = softmax(z)" : "w   = softmax(s)", p.w.data());
  show("out = w V", p.out.data());
  const real e = std::exp(scaled ? p.scale : real(1));
  std::snprintf(buf, sizeof buf, "w = [E, 1, E, 1] / (2E + 2) with E = exp(%s) = %.4f",
                scaled ? "0.7071" : "1", static_cast<double>(e));
  std::printf("     %s\n", buf);

  std::printf("\n Backward from dL/dout = 1 (L = out). \"formula\" applies the rule above by\n"
              " hand (plain loops, examples/step_through.h hand_gradients); \"engine\" is\n"
              " qkv's autograd, read from .grad() after retain_grad().\n");
  if (with_fd)
    std::printf(" \"fin.diff\" (finite difference) nudges one number by +-h, reruns the\n"
                " forward and takes (L+ - L-) / 2h, h = %g.\n",
                static_cast<double>(kFdStep));
  Gaps gaps;
  const HandGradients h = hand_gradients(p);
  const real out = p.out.item();
  grad_step("dL/dw_j = v_j", "out = sum_j w_j v_j", h.w, p.w.grad(), f(fd.w), gaps);
  std::snprintf(buf, sizeof buf, "softmax backward; here sum(w * dL/dw) = out = %.4f",
                static_cast<double>(out));
  if (scaled) {
    grad_step("dL/dz = w * (dL/dw - sum(w * dL/dw))", buf, h.z, p.z.grad(), f(fd.z), gaps);
    grad_step("dL/ds = scale * dL/dz", "z = s * scale", h.s, p.s.grad(), f(fd.s), gaps);
  } else {
    grad_step("dL/ds = w * (dL/dw - sum(w * dL/dw))", buf, h.s, p.s.grad(), f(fd.s), gaps);
  }
  grad_step(scaled ? "dL/dq = scale * sum_j dL/dz_j k_j  (= sum_j dL/ds_j k_j)"
                   : "dL/dq = sum_j dL/ds_j k_j",
            "s_j = q . k_j", h.q, p.q.grad(), f(fd.q), gaps);
  grad_step("dL/dk_j = dL/ds_j q", "q = [1, 0], so only column 0 of K gets gradient",
            h.K, p.K.grad(), f(fd.K), gaps);
  grad_step("dL/dv_j = w_j", "out = sum_j w_j v_j", h.V, p.V.grad(), f(fd.V), gaps);
  std::printf("\n   max |engine - formula| over all of the above: %.1e\n", gaps.formula);
  if (with_fd)
    std::printf("   max |engine - finite difference| over all of the above: %.1e\n", gaps.fd);
}

void part1(bool with_fd) {
  banner("Part 1. One query attends over four keys: forward, then backward");
  const WorkedExample ex = worked_example();
  std::printf(" q = [1, 0]                        (1,2)  the query\n"
              " K = [[1,0], [0,1], [1,1], [0,0]]  (4,2)  one key k_j per row\n"
              " V = [[1], [2], [3], [4]]          (4,1)  one value v_j per row\n"
              " out = softmax(q K^T * scale) V: a weighted average of the values.\n");
  part1_variant(ex, /*scaled=*/true, with_fd);
  part1_variant(ex, /*scaled=*/false, with_fd);
  std::printf("\n Note: unscaled, softmax([1, 0, 1, 0]) = [0.3655, 0.1345, 0.3655, 0.1345]\n"
              " (e / (2e + 2) and 1 / (2e + 2)) and out = 2.2689. A widely copied write-up\n"
              " of this example prints other numbers; tests/test_step_through.cpp pins these.\n");
}

// ---- Part 2 ------------------------------------------------------------------

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s + "]";
}

void grad_norm_table(const TinyRun& r) {
  const std::vector<ParamGradNorm> rows = param_grad_norms(*r.model);
  double top = 0;
  for (const auto& row : rows) top = std::max(top, row.norm);
  std::printf("\n Gradient norm |dL/dp| of every parameter, layer by layer. Bar: log10\n"
              " scale, one # per decade above 1e-8.\n");
  std::string group;
  for (const auto& row : rows) {
    if (row.group != group) {
      group = row.group;
      std::printf("   %s\n", group.c_str());
    }
    const int hashes = row.norm > 0 ? std::max(0, static_cast<int>(std::floor(std::log10(row.norm) + 8))) : 0;
    std::printf("     %-24s %-7s %9.2e  %s\n", row.name.c_str(), to_string(row.shape).c_str(),
                row.norm, std::string(static_cast<size_t>(std::min(hashes, 30)), '#').c_str());
  }
  std::printf(" The key biases (w_k.bias) get ~0: adding b to every key adds q.b to a\n"
              " whole row of scores, and softmax ignores a shift of its row.\n");
}

void layer_norm_step(const TinyRun& r) {
  const nn::LayerNorm& ln = *r.model->decoder->layers[0]->norm3;
  const Tensor& x = r.ln_x;            // (1,T,D): h + ffn(h)
  const Tensor& dy = r.ln_out.grad();  // (1,T,D): the gradient arriving at y
  const int64_t D = ln.D;
  const LayerNormByFormula f =
      layer_norm_by_formula(x, dy, ln.weight.data(), ln.bias.data(), ln.eps);

  section("2b. LayerNorm backward by its formula: decoder.layers.0.norm3, row 0");
  std::printf(" x = h + ffn(h), the residual sum, made in the same op (add_layer_norm);\n"
              " the sum passes dx unchanged to both h and ffn(h).\n"
              " y = xhat * gamma + beta, xhat = (x - mean) * rstd, rstd = 1/sqrt(var+eps).\n"
              " mean and rstd depend on every x of the row, hence the two extra terms:\n"
              "   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),\n"
              "   dxhat = dy * gamma  (gamma is all ones at initialisation)\n"
              " \"formula\" is the library's kernel nn::layernorm_backward called on these\n"
              " numbers; \"engine\" is the gradient the autograd graph delivered to\n"
              " ffn(h); \"fin.diff\" nudges one x by +-h (h = %g) and takes the change\n"
              " of sum(dy * y) over 2h.\n",
              static_cast<double>(kFdStep));
  auto line = [](const char* label, const Tensor& t) {
    std::printf("  %-11s %s\n", label, rows_of(t, 4)[0].c_str());
  };
  auto row0 = [D](const Tensor& t) { return t.reshape({-1}).slice0(0, D); };
  auto vec = [](const std::vector<double>& v) {
    return Tensor::from_vector(std::vector<real>(v.begin(), v.end()));
  };
  line("x", row0(x));
  std::printf("  %-11s mean = %.4f, rstd = %.4f\n", "", static_cast<double>(f.mean.data()[0]),
              static_cast<double>(f.rstd.data()[0]));
  line("xhat", vec(f.xhat));
  line("dy (engine)", row0(dy));
  line("dxhat", vec(f.dxhat));
  std::printf("  %-11s mean(dxhat) = %.4f, mean(dxhat * xhat) = %.4f\n", "", f.mean_dxhat,
              f.mean_dxhat_xhat);
  const Tensor& engine_dx = r.ln_dx;  // what reached ffn(h), the addend
  line("dx formula", row0(f.dx));
  line("dx engine", row0(engine_dx));
  line("dx fin.diff", row0(f.dx_fd));
  const long long rows = static_cast<long long>(x.numel() / D);
  std::printf("  max |formula - engine| over all %lld rows: %.1e (the graph runs this kernel)\n",
              rows, max_abs_diff(f.dx, engine_dx));
  std::printf("  max |formula - fin.diff| over all %lld rows: %.1e\n", rows,
              max_abs_diff(f.dx, f.dx_fd));
}

void attention_step(const TinyRun& r) {
  const nn::MultiHeadAttention& m = *r.model->decoder->layers[0]->cross_attn;
  const AttentionBackwardCheck c =
      attention_backward_by_hand(m, r.att_q.data(), r.att_kv.data(), r.att_out.grad(), 0);

  section("2c. Attention backward by hand: decoder.layers.0.cross_attn, head 0");
  std::printf(" The T = %lld target positions (queries) attend over the S = %lld source\n"
              " positions (keys); d_k = %lld.\n"
              " The fused op saved P = softmax(scores) (B,H,T,S). Its backward, per head,\n"
              " with dS = dL/d(scaled scores):\n"
              "   dO_h = (dY Wo)[:, head columns]   dY: gradient at the sublayer output\n"
              "   dP   = dO_h V_h^T                 (T,d_k) x (d_k,S) -> (T,S)\n"
              "   dS   = P * (dP - rowsum(dP * P))  softmax backward, row by row\n"
              "   dQ_h = dS K_h / sqrt(d_k), dK_h = dS^T Q_h / sqrt(d_k), dV_h = P^T dO_h\n",
              static_cast<long long>(c.T), static_cast<long long>(c.S),
              static_cast<long long>(c.d_k));
  std::printf("\n   P (T,S)                            dP (T,S)\n");
  const auto lp = rows_of(c.P, 4), ld = rows_of(c.dP, 4);
  for (size_t i = 0; i < lp.size(); ++i)
    std::printf("   %-34s %s\n", lp[i].c_str(), ld[i].c_str());
  std::printf("   rowsum(dP * P) (T)  %s\n", rows_of(c.rowdot, 4)[0].c_str());
  std::printf("\n   dS by the formula                  dS from the engine (softmax op)\n");
  const auto lf = rows_of(c.dS, 4), le = rows_of(c.dS_engine, 4);
  for (size_t i = 0; i < lf.size(); ++i)
    std::printf("   %-34s %s\n", lf[i].c_str(), le[i].c_str());
  std::printf("   max |formula - engine| for dS: %.1e\n", max_abs_diff(c.dS, c.dS_engine));
  std::printf("\n Then through the input projections (all heads): dx_q = dQ Wq and\n"
              " dx_kv = dK Wk + dV Wv, against the fused multi_head_attention backward:\n"
              "   max |formula - engine|: dx_q %.1e, dx_kv (the encoder output) %.1e\n",
              max_abs_diff(c.dxq, c.dxq_engine), max_abs_diff(c.dxkv, c.dxkv_engine));
}

void part2(const TinyRun& r) {
  banner("Part 2. A tiny Transformer, one copy example, one backward pass");
  const auto& c = r.cfg;
  std::printf(" Seq2SeqTransformer with d_model %lld, %lld heads (d_k %lld), d_ff %lld,\n"
              " %lld encoder and %lld decoder layer, dropout 0, seed %llu: %lld parameters.\n",
              (long long)c.d_model, (long long)c.heads, (long long)(c.d_model / c.heads),
              (long long)c.d_ff, (long long)c.encoder_layers, (long long)c.decoder_layers,
              (unsigned long long)c.seed, (long long)r.model->num_parameters());
  std::printf(" Tokens: 0 pad, 1 bos, 2 eos, symbols from 3. Copy the source:\n"
              "   src %-10s tgt_in %-10s tgt_out %s\n",
              ids_text(r.ex.src.ids).c_str(), ids_text(r.ex.tgt_in.ids).c_str(),
              ids_text(r.ex.tgt_out).c_str());
  std::printf(" loss = cross_entropy(logits %s, tgt_out) = %.4f\n"
              " (a uniform guess over %lld tokens would give ln %lld = %.4f)\n",
              to_string(r.logits.shape()).c_str(), static_cast<double>(r.loss.item()),
              (long long)c.tgt_vocab, (long long)c.tgt_vocab,
              std::log(static_cast<double>(c.tgt_vocab)));
  section("2a. Gradient norms");
  grad_norm_table(r);
  layer_norm_step(r);
  attention_step(r);
}

// The graph of part 2's pass. Its module boxes come from the paths
// nn::ModuleScope records while detect-anomaly mode is on (main turns it on
// for the pass it draws).
void write_graph(const TinyRun& r, const std::string& path, const DotOptions& options) {
  std::ofstream out(path);
  if (!out) throw Error("cannot open '" + path + "' for writing");
  write_dot(r.loss, out, options);
  out.close();
  if (!out) throw Error("writing '" + path + "' failed");
  section("The autograd graph");
  std::printf(" Wrote %s: part 2's graph of %zu variables,\n"
              " one box per layer; each op shows the module that made it, its shape\n"
              " and its gradient norm, and arrows follow the forward pass.\n",
              path.c_str(), topological_order(r.loss).size());
  std::fputs(options.show_parameters
                 ? " Every parameter is a node of its own (--dot-params).\n"
                 : " Each op lists the parameters it reads (--dot-params draws them\n"
                   " as nodes of their own).\n",
             stdout);
  // Quote the path for the shell: '...' with each ' written as '\''.
  std::string q = "'";
  for (char ch : path) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  q += "'";
  if (std::system("command -v dot >/dev/null 2>&1") == 0) {
    const std::string cmd = "dot -Tsvg " + q + " -o " + q.substr(0, q.size() - 1) + ".svg'";
    if (std::system(cmd.c_str()) == 0)
      std::printf(" Rendered %s.svg with Graphviz (dot -Tsvg).\n", path.c_str());
    else
      std::printf(" `%s` failed.\n", cmd.c_str());
  } else {
    std::printf(" Graphviz `dot` is not installed. To render: apt-get install graphviz,\n"
                " then dot -Tsvg %s -o %s.svg\n", path.c_str(), path.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"step_through: watch a gradient flow through attention and a tiny Transformer"};
  std::string part = "all", dot_path;
  bool no_fd = false;
  app.add_option("--part", part, "1, 2 or all (default)")
      ->type_name("N")
      ->check(CLI::IsMember({"1", "2", "all"}));
  CLI::Option* dot = app.add_option("--dot", dot_path, "write part 2's autograd graph (Graphviz DOT)")
      ->type_name("PATH");
  DotOptions dot_options;
  app.add_flag("--dot-params", dot_options.show_parameters,
               "with --dot: draw every parameter as a node of its own")
      ->needs(dot);
  app.add_flag("--no-fd", no_fd, "skip the finite differences of part 1");
  CLI11_PARSE(app, argc, argv);

  try {
    if (!dot_path.empty()) outputs::check_file_path("--dot", dot_path);  // before any work
    if (part != "2") part1(!no_fd);
    if (part != "1" || !dot_path.empty()) {
      const bool draw = !dot_path.empty();
      const TinyRun r = [&] {
        // Detect-anomaly mode records in each op the module that made it
        // (Node::module), which the drawing boxes by; it changes no number.
        DetectAnomalyGuard record_modules(draw);
        return run_tiny_transformer(/*retain_all=*/draw);
      }();
      if (part != "1") part2(r);
      if (draw) write_graph(r, dot_path, dot_options);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_through: %s\n", e.what());
    return 1;
  }
  return 0;
}
