// The numbers examples/step_through prints. Part 1 pins the worked attention
// example (docs/attention-backward.md's) to values derived by hand in the
// comments, for the engine and for the by-hand loops alike. Part 2 checks
// that the by-hand LayerNorm and softmax backward (plain loops in double,
// examples/by_hand.h) agree with the engine on a real tiny Transformer,
// and that a wrong formula would not: a term dropped or a sign flipped is off
// by far more than the tolerance. Last, the engine's backward order as
// backward_order lists it is the order run_backward really calls the nodes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/anomaly.h"
#include "check_mat.h"
#include "examples/step_llama.h"
#include "examples/step_through.h"
#include "fixture.h"
#include "recording_node.h"

using namespace qkv;
using qkv::testing::recorded;
using namespace qkv::step;
using qkv::testing::check_mat;

namespace {

// Both sources of a number, the engine and the by-hand loops, against the same
// hand-derived values.
void check_both(const Tensor& engine, const Mat& by_hand, const std::vector<double>& want,
                const char* what) {
  check_mat(to_mat(engine), want, 1e-5, what);
  check_mat(by_hand, want, 1e-6, what);
}

// The tolerances: by hand (double) vs the engine (float32) on the model's
// numbers, and the least gap a wrong formula must show.
constexpr double kAgree = 1e-6;
constexpr double kWrong = 1e-2;

}  // namespace

// ---- Part 1: the worked example ------------------------------------------------
// q = [1,0], K rows k_1..k_4 = [1,0],[0,1],[1,1],[0,0], V = [1,2,3,4]^T.
// q K^T = [1, 0, 1, 0] in both variants. The two variants' tests share their
// shape on purpose: each pins its own numbers, derived in its comment.

TEST_CASE(
    "worked example, unscaled (docs/attention-backward.md): Z = [1,0,1,0], P = "
    "[0.3655,0.1345,..], out 2.2689, and dP, dZ, dq, dK, dV, engine and by hand") {
  // P = [e, 1, e, 1] / (2e + 2):  e / 7.436564 = 0.365529,  1 / 7.436564 = 0.134471.
  // out = sum_j p_j v_j = 0.365529 (1 + 3) + 0.134471 (2 + 4) = 2.268941.
  // dP = V^T = [1, 2, 3, 4];  rowsum(dP * P) = out, so dZ_j = p_j (v_j - out):
  //   0.365529 (1 - 2.268941) = -0.463835,  0.134471 (2 - 2.268941) = -0.036165,
  //   0.365529 (0.731059) = 0.267223,       0.134471 (1.731059) = 0.232777.
  // dq = dZ K = [dZ_1 + dZ_3, dZ_2 + dZ_3] = [-0.196612, 0.231058].
  // dK = dZ^T q: row j is [dZ_j, 0].   dV = P^T.
  const AttentionPass p = attention_pass(worked_example(), /*scaled=*/false);
  const AttentionByHand h = attention_by_hand(worked_example(), /*scaled=*/false);
  CHECK(p.Z.grad_fn()->name() == std::string("matmul"));  // no scaling op in the graph
  check_both(p.Z.data(), h.Z, {1, 0, 1, 0}, "Z");
  check_both(p.P.data(), h.P, {0.365529, 0.134471, 0.365529, 0.134471}, "P");
  check_both(p.out.data(), h.out, {2.268941}, "out");
  check_both(p.P.grad(), h.dP, {1, 2, 3, 4}, "dP");
  check_both(p.Z.grad(), h.dZ, {-0.463835, -0.036165, 0.267223, 0.232777}, "dZ");
  check_both(p.q.grad(), h.dq, {-0.196612, 0.231058}, "dq");
  check_both(p.K.grad(), h.dK, {-0.463835, 0, -0.036165, 0, 0.267223, 0, 0.232777, 0}, "dK");
  check_both(p.V.grad(), h.dV, {0.365529, 0.134471, 0.365529, 0.134471}, "dV");
}

TEST_CASE(
    "worked example, scaled by 1/sqrt(d_k) = 1/sqrt(2): Z, P, out 2.3302, and dP, dZ, "
    "dq, dK, dV, engine and by hand") {
  // Z = q K^T / sqrt(2) = [0.707107, 0, 0.707107, 0]; E = exp(0.707107) = 2.028115.
  // P = [E, 1, E, 1] / (2E + 2) = [2.028115, 1, ..] / 6.056230 = [0.334881, 0.165119, ..].
  // out = 0.334881 (1 + 3) + 0.165119 (2 + 4) = 2.330238.
  // dZ_j = p_j (v_j - out) = 0.334881 (-1.330238) = -0.445471,
  //   0.165119 (-0.330238) = -0.054529, 0.334881 (0.669762) = 0.224290,
  //   0.165119 (1.669762) = 0.275710.
  // scale * dZ = [-0.314996, -0.038558, 0.158597, 0.194956], so
  // dq = scale * dZ K = [-0.314996 + 0.158597, -0.038558 + 0.158597] = [-0.156399, 0.120039],
  // and row j of dK is [scale * dZ_j, 0].
  const AttentionPass p = attention_pass(worked_example(), /*scaled=*/true);
  const AttentionByHand h = attention_by_hand(worked_example(), /*scaled=*/true);
  CHECK(attention_scale(worked_example(), true) == doctest::Approx(0.707107).epsilon(1e-6));
  check_both(p.Z.data(), h.Z, {0.707107, 0, 0.707107, 0}, "Z");
  check_both(p.P.data(), h.P, {0.334881, 0.165119, 0.334881, 0.165119}, "P");
  check_both(p.out.data(), h.out, {2.330238}, "out");
  check_both(p.P.grad(), h.dP, {1, 2, 3, 4}, "dP");
  check_both(p.Z.grad(), h.dZ, {-0.445471, -0.054529, 0.224290, 0.275710}, "dZ");
  check_both(p.q.grad(), h.dq, {-0.156399, 0.120039}, "dq");
  check_both(p.K.grad(), h.dK, {-0.314996, 0, -0.038558, 0, 0.158597, 0, 0.194956, 0}, "dK");
  check_both(p.V.grad(), h.dV, {0.334881, 0.165119, 0.334881, 0.165119}, "dV");
}

TEST_CASE(
    "worked example: the engine's gradients equal the by-hand formulas, and the by-hand "
    "formulas equal central finite differences of the by-hand forward, both variants") {
  for (bool scaled : {true, false}) {
    CAPTURE(scaled);
    const AttentionPass p = attention_pass(worked_example(), scaled);
    const AttentionByHand h = attention_by_hand(worked_example(), scaled);
    const FiniteDifferences fd = finite_differences(worked_example(), scaled);
    // float32 engine vs double by hand: rounding only.
    CHECK(max_gap(to_mat(p.P.grad()), h.dP) < 1e-6);
    CHECK(max_gap(to_mat(p.Z.grad()), h.dZ) < 1e-6);
    CHECK(max_gap(to_mat(p.q.grad()), h.dq) < 1e-6);
    CHECK(max_gap(to_mat(p.K.grad()), h.dK) < 1e-6);
    CHECK(max_gap(to_mat(p.V.grad()), h.dV) < 1e-6);
    // double, h = 1e-6: truncation ~1e-12 and rounding ~1e-10; a wrong
    // formula would be off by 1e-2 or more here.
    CHECK(max_gap(h.dP, fd.P) < 1e-8);
    CHECK(max_gap(h.dZ, fd.Z) < 1e-8);
    CHECK(max_gap(h.dq, fd.q) < 1e-8);
    CHECK(max_gap(h.dK, fd.K) < 1e-8);
    CHECK(max_gap(h.dV, fd.V) < 1e-8);
  }
}

TEST_CASE(
    "worked example: the numbers make step prints for the unscaled variant are the ones "
    "docs/attention-backward.md's worked check gives (scores, P, out, dZ)") {
  std::ifstream in(repo_root() + "/docs/attention-backward.md");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  // The page with every run of white space (line breaks too) made one space.
  std::string page;
  for (char ch : ss.str()) {
    const bool space = ch == ' ' || ch == '\n' || ch == '\t';
    if (!space)
      page += ch;
    else if (!page.empty() && page.back() != ' ')
      page += ' ';
  }
  // A row as the page writes it: "[-0.4638, -0.0362, 0.2672, 0.2328]".
  auto text = [](const Mat& m, const char* fmt) {
    std::string s = "[";
    char buf[32];
    for (size_t i = 0; i < m.a.size(); ++i) {
      std::snprintf(buf, sizeof buf, fmt, m.a[i]);
      s += (i ? ", " : "") + std::string(buf);
    }
    return s + "]";
  };
  const AttentionByHand h = attention_by_hand(worked_example(), /*scaled=*/false);
  for (const std::string& want :
       {"scores " + text(h.Z, "%g"), "P = " + text(h.P, "%.4f"), "v = " + text(h.dP, "%g"),
        "= " + text(h.out, "%.4f").substr(1, 6), text(h.dZ, "%.4f")})
    CHECK_MESSAGE(page.find(want) != std::string::npos,
                  "docs/attention-backward.md does not say \"" << want << "\"");
}

TEST_CASE("hand::central_difference is exact for a quadratic and leaves its argument unchanged") {
  // F(x) = sum x_i^2 has dF/dx = 2x, and central differences have no h^2 term for it.
  Mat x(1, 3);
  x.a = {0.5, -1.5, 2};
  const Mat g = hand::central_difference(
      [](const Mat& t) {
        double s = 0;
        for (double v : t.a) s += v * v;
        return s;
      },
      x, 0.25);
  check_mat(g, {1, -3, 4}, 1e-12, "2x");
  check_mat(x, {0.5, -1.5, 2}, 0, "x");
}

// ---- Part 2: the tiny Transformer ----------------------------------------------------

TEST_CASE(
    "tiny Transformer: the LayerNorm formula dx = rstd*(dxhat - mean(dxhat) - "
    "xhat*mean(dxhat*xhat)) gives the engine's gradient at norm3's input, every row") {
  const TinyRun r = run_tiny_transformer();
  const auto& norm3 = *r.model->decoder->layers.at(0)->norm3;
  // The captured Vars really are norm3's input and output.
  REQUIRE_FALSE(r.ln_out.is_leaf());
  CHECK(std::string(r.ln_out.grad_fn()->name()) == "add_layer_norm");
  CHECK(r.ln_out.grad_fn()->inputs.at(2).same_as(norm3.weight));
  CHECK(r.ln_x.shape() == Shape{1, 4, 8});
  REQUIRE(r.ln_out.grad().defined());
  REQUIRE(r.ln_dx.defined());

  // By hand, from the saved x and the dy the engine delivered, in double.
  const LayerNormByHand by_hand = layer_norm_by_hand(r.ln_x, r.ln_out.grad(), norm3.weight.data(),
                                                     norm3.bias.data(), norm3.eps);
  const hand::LayerNorm& f = by_hand.f;
  CHECK(relative_gap(f.dx, to_mat(r.ln_dx)) < kAgree);
  // norm3's parameters are used once, so their .grad() is exactly this op's.
  CHECK(relative_gap(f.dgamma, to_mat(norm3.weight.grad())) < kAgree);
  CHECK(relative_gap(f.dbeta, to_mat(norm3.bias.grad())) < kAgree);
  // The formula itself, against finite differences of sum(dy * y) (double).
  REQUIRE(by_hand.dx_fd.a.size() == f.dx.a.size());
  CHECK(relative_gap(f.dx, by_hand.dx_fd) < 1e-8);
  // Its pieces: xhat has mean 0 and variance 1 in every row, and each row of
  // dx sums to 0 (y does not change when the whole input row shifts).
  for (int64_t t = 0; t < 4; ++t) {
    double m = 0, v = 0, s = 0;
    for (int64_t j = 0; j < 8; ++j) {
      m += f.xhat(t, j) / 8;
      v += f.xhat(t, j) * f.xhat(t, j) / 8;
      s += f.dx(t, j);
    }
    CHECK(std::fabs(m) < 1e-12);
    CHECK(v == doctest::Approx(1).epsilon(1e-3));  // 1 up to eps / var
    CHECK(std::fabs(s) < 1e-12);
  }
  // The model's own mean and rstd agree (the engine's forward saved them as floats).
  CHECK(f.rstd(0, 0) == doctest::Approx(0.6448).epsilon(1e-4));
  CHECK(f.mean(0, 0) == doctest::Approx(-0.0429).epsilon(1e-3));
}

TEST_CASE(
    "a wrong LayerNorm backward (the mean term or the xhat term dropped, a sign flipped, "
    "rstd forgotten) differs from the engine's dx by far more than the tolerance") {
  const TinyRun r = run_tiny_transformer();
  const auto& norm3 = *r.model->decoder->layers.at(0)->norm3;
  const hand::LayerNorm f = layer_norm_by_hand(r.ln_x, r.ln_out.grad(), norm3.weight.data(),
                                               norm3.bias.data(), norm3.eps, false)
                                .f;
  const Mat engine = to_mat(r.ln_dx);
  // dx(i,j) = rstd * (dxhat - a - xhat * b), a = mean(dxhat), b = mean(dxhat * xhat),
  // with the pieces switched on and off: (sign of a, sign of b, use rstd).
  auto variant = [&](double ka, double kb, bool use_rstd) {
    Mat dx = f.dx;
    for (int64_t i = 0; i < dx.rows; ++i)
      for (int64_t j = 0; j < dx.cols; ++j)
        dx(i, j) = (use_rstd ? f.rstd(i, 0) : 1.0) * (f.dxhat(i, j) - ka * f.mean_dxhat(i, 0) -
                                                      kb * f.xhat(i, j) * f.mean_dxhat_xhat(i, 0));
    return dx;
  };
  CHECK(relative_gap(variant(1, 1, true), engine) < kAgree);  // the formula itself
  const double no_mean = relative_gap(variant(0, 1, true), engine);
  const double no_xhat = relative_gap(variant(1, 0, true), engine);
  const double flipped = relative_gap(variant(1, -1, true), engine);
  const double no_rstd = relative_gap(variant(1, 1, false), engine);
  CAPTURE(no_mean);
  CAPTURE(no_xhat);
  CAPTURE(flipped);
  CAPTURE(no_rstd);
  CHECK(no_mean > kWrong);
  CHECK(no_xhat > kWrong);
  CHECK(flipped > kWrong);
  CHECK(no_rstd > kWrong);
}

TEST_CASE(
    "tiny Transformer: the softmax backward dZ = P*(dP - rowsum(dP*P)) by hand equals "
    "qkv's softmax gradient, and the chain to dxq, dxkv equals the fused attention op") {
  const TinyRun r = run_tiny_transformer();
  const auto& attn = *r.model->decoder->layers.at(0)->cross_attn;
  CHECK(r.att_out.grad_fn()->inputs.at(2).same_as(attn.w_q->weight));
  for (int64_t head : {0, 1}) {
    CAPTURE(head);
    const AttentionBackwardCheck c =
        attention_backward_by_hand(attn, r.att_q.data(), r.att_kv.data(), r.att_out.grad(), head);
    CHECK(c.T == 4);
    CHECK(c.S == 3);
    CHECK(c.d_k == 4);
    // P by hand equals what the fused op saved, and what the model kept.
    CHECK(relative_gap(c.P, c.P_engine) < kAgree);
    const Tensor& kept = attn.last_attention();  // (1,H,T,S)
    REQUIRE(kept.shape() == Shape{1, 2, 4, 3});
    CHECK(relative_gap(
              c.P, to_mat(kept.reshape({24}).slice0(head * 12, head * 12 + 12).reshape({4, 3}))) <
          kAgree);
    for (int64_t i = 0; i < c.T; ++i) {
      double p = 0, dz = 0;
      for (int64_t j = 0; j < c.S; ++j) {
        p += c.P(i, j);
        dz += c.dZ(i, j);
      }
      CHECK(p == doctest::Approx(1).epsilon(1e-12));
      CHECK(std::fabs(dz) < 1e-12);  // softmax backward: rows of dZ sum to 0
    }
    CHECK(relative_gap(c.dZ, c.dZ_engine) < kAgree);
    CHECK(max_gap(c.dZ, Mat(c.T, c.S)) > 1e-3);  // dZ is not trivially zero
    CHECK(relative_gap(c.dxq, c.dxq_engine) < kAgree);
    CHECK(relative_gap(c.dxkv, c.dxkv_engine) < kAgree);
    // The memory feeds only this cross-attention, so the full model's
    // gradient at the encoder output is this sublayer's dxkv.
    CHECK(relative_gap(c.dxkv_engine, to_mat(r.att_kv.grad())) < kAgree);
  }
}

TEST_CASE(
    "a wrong softmax backward (the rowsum term dropped, or its sign flipped) differs from "
    "the engine's dZ by far more than the tolerance") {
  const TinyRun r = run_tiny_transformer();
  const auto& attn = *r.model->decoder->layers.at(0)->cross_attn;
  for (int64_t head : {0, 1}) {
    CAPTURE(head);
    const AttentionBackwardCheck c =
        attention_backward_by_hand(attn, r.att_q.data(), r.att_kv.data(), r.att_out.grad(), head);
    // dZ = P * (dP - k * rowsum(dP * P)), k = 1 the formula, 0 dropped, -1 flipped.
    auto variant = [&](double k) {
      Mat dZ(c.T, c.S);
      for (int64_t i = 0; i < c.T; ++i)
        for (int64_t j = 0; j < c.S; ++j) dZ(i, j) = c.P(i, j) * (c.dP(i, j) - k * c.rowdot(i, 0));
      return dZ;
    };
    CHECK(relative_gap(hand::softmax_backward(c.P, c.dP), c.dZ_engine) < kAgree);
    CHECK(relative_gap(variant(1), c.dZ_engine) < kAgree);
    const double dropped = relative_gap(variant(0), c.dZ_engine);
    const double flipped = relative_gap(variant(-1), c.dZ_engine);
    CAPTURE(dropped);
    CAPTURE(flipped);
    CHECK(dropped > kWrong);
    CHECK(flipped > kWrong);
  }
}

TEST_CASE(
    "tiny Transformer: the gradient-norm table lists every parameter once, in "
    "registration order, grouped by layer; key biases get ~0 gradient") {
  const TinyRun r = run_tiny_transformer();
  const auto named = r.model->named_parameters();
  const std::vector<ParamGradNorm> rows = param_grad_norms(*r.model);
  REQUIRE(rows.size() == named.size());
  std::vector<std::string> group_order;
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i].group + "." + rows[i].name == named[i].first);
    CHECK(rows[i].shape == named[i].second.shape());
    CHECK(rows[i].norm == doctest::Approx(frobenius_norm(named[i].second.grad())));
    CHECK(std::isfinite(rows[i].norm));
    if (group_order.empty() || group_order.back() != rows[i].group)
      group_order.push_back(rows[i].group);
    const bool key_bias = rows[i].name.find("w_k.bias") != std::string::npos;
    if (key_bias)
      CHECK_MESSAGE(rows[i].norm < 1e-6, named[i].first);  // softmax ignores row shifts
    else
      CHECK_MESSAGE(rows[i].norm > 1e-3, named[i].first);  // every other parameter learns
  }
  // Each group appears as one contiguous block.
  CHECK(group_order == std::vector<std::string>{"src_embed", "tgt_embed", "encoder.layers.0",
                                                "decoder.layers.0", "lm_head"});
}

// ---- The engine's backward order ----------------------------------------------------

TEST_CASE(
    "backward_order lists the nodes in the order run_backward calls their backward "
    "(a graph with a diamond and a skip connection, and part 2's model)") {
  SUBCASE("ops that record when the engine calls them") {
    std::vector<std::string> log;
    Var x(Tensor::ones({2}), true);
    x.set_name("x");
    const Var a = recorded("a", {x}, log);
    const Var b = recorded("b", {a}, log), c = recorded("c", {a}, log);  // the diamond
    const Var d = recorded("d", {b, c}, log);
    Var e = recorded("e", {d, x}, log);  // x again: a skip connection
    const std::vector<BackwardStep> steps = backward_order(e);
    e.backward(Tensor::ones({2}));
    REQUIRE(log.size() == 5);
    REQUIRE(steps.size() == log.size());
    for (size_t k = 0; k < log.size(); ++k) CHECK(steps[k].op == log[k]);
    CHECK(steps[0].op == "e");
    CHECK(steps[0].sends_to == std::vector<std::string>{"#2", "x"});
    CHECK(steps.back().op == "a");
    CHECK(steps.back().sends_to == std::vector<std::string>{"x"});
  }
  SUBCASE("part 2's model, its modules recorded under DetectAnomalyGuard") {
    const TinyRun r = [] {
      DetectAnomalyGuard record_modules;
      return run_tiny_transformer(/*retain_all=*/true);
    }();
    const std::vector<BackwardStep> steps = backward_order(r.loss);
    int ops = 0;
    for (const Var& v : topological_order(r.loss))
      if (!v.is_leaf()) {
        ++ops;
        CHECK_MESSAGE(v.grad().defined(), v.grad_fn()->name());  // the backward reached every op
      }
    REQUIRE(steps.size() == static_cast<size_t>(ops));
    CHECK(steps[0].op == "cross_entropy");  // the loss's node comes first
    CHECK(steps[0].shape == Shape{});
    CHECK(steps[0].sends_to == std::vector<std::string>{"#2"});
    bool norm3 = false;
    for (size_t k = 0; k < steps.size(); ++k) {
      // Every op's gradient goes to ops that run later.
      for (const std::string& to : steps[k].sends_to)
        if (to[0] == '#') CHECK(std::stoul(to.substr(1)) > k + 1);
      norm3 =
          norm3 || (steps[k].op == "add_layer_norm" && steps[k].module == "decoder.layers.0.norm3");
    }
    CHECK(norm3);
  }
  SUBCASE("without DetectAnomalyGuard no module is recorded") {
    const TinyRun r = run_tiny_transformer();
    for (const BackwardStep& s : backward_order(r.loss)) CHECK(s.module.empty());
  }
}

TEST_CASE("step-through helpers reject what they cannot handle with qkv::Error") {
  const TinyRun r = run_tiny_transformer();
  Var stranger(Tensor::ones({8}), true);
  stranger.set_name("stranger");
  CHECK_THROWS_WITH_AS(find_op_output(r.loss, "layer_norm", stranger),
                       doctest::Contains("stranger"), Error);
  const auto& attn = *r.model->decoder->layers.at(0)->cross_attn;
  const Tensor two = Tensor::zeros({2, 4, 8});  // B = 2
  CHECK_THROWS_AS(attention_backward_by_hand(attn, two, two, two, 0), Error);
  CHECK_THROWS_AS(attention_backward_by_hand(attn, r.att_q.data(), r.att_kv.data(),
                                             r.att_out.grad(), /*head=*/2),
                  Error);
  CHECK_THROWS_AS(layer_norm_by_hand(Tensor::zeros({2, 8}), Tensor::zeros({2, 7}),
                                     Tensor::ones({8}), Tensor::zeros({8}), 1e-5),
                  Error);
  CHECK_THROWS_AS(max_gap(Mat(2, 3), Mat(3, 2)), Error);
}

TEST_CASE(
    "part 3, the llama-style pieces: one RMSNorm row and one RoPE pair, engine and by hand "
    "against numbers worked out on paper, and finite differences") {
  // RMSNorm: x = [1, 2, 3, 4], mean(x^2) = 30 / 4 = 7.5, rrms = 1 / sqrt(7.5) = 0.365148.
  // xhat = x rrms = [0.365148, 0.730297, 1.095445, 1.460593]; y = xhat gamma, gamma = [1, .5, 2,
  // 1]. dxhat = dy gamma = [1, -0.5, 1, 2]; mean(dxhat xhat) = 4.016632 / 4 = 1.004158; dx = rrms
  // (dxhat - xhat 1.004158) = 0.365148 [0.633333, -1.233333, -0.1, 0.533333]. dgamma = dy xhat, dy
  // = [1, -1, 0.5, 2].
  const LlamaExample ex = llama_example();
  const LlamaPass p = llama_pass(ex);
  const LlamaByHand h = llama_by_hand(ex, /*with_fd=*/true);
  CHECK(std::fabs(h.norm.rrms(0, 0) - 0.365148) < 1e-6);
  check_both(p.y.data(), h.norm.y, {0.365148, 0.365148, 2.190890, 1.460593}, "y");
  check_both(p.x.grad(), h.norm.dx, {0.231261, -0.450350, -0.036515, 0.194746}, "dx");
  check_both(p.gamma.grad(), h.norm.dgamma, {0.365148, -0.730297, 0.547723, 2.921187}, "dgamma");
  check_mat(h.fd_x, {0.231261, -0.450350, -0.036515, 0.194746}, 1e-6, "dx (fin.diff)");
  check_mat(h.fd_gamma, {0.365148, -0.730297, 0.547723, 2.921187}, 1e-6, "dgamma (fin.diff)");
  // RoPE, position 1 of one head with d_k = 2: a = 1 radian, cos 1 = 0.540302, sin 1 = 0.841471.
  // y = [1 cos - 2 sin, 1 sin + 2 cos] = [-1.142640, 1.922076];
  // dx = R(-a) dy, dy = [1, -1]: [cos - sin, -sin - cos] = [-0.301169, -1.381773].
  check_both(slice_position_1(p.rotated.data()), h.rope.y, {-1.142640, 1.922076}, "rope y");
  check_both(slice_position_1(p.pair.grad()), h.rope.dx, {-0.301169, -1.381773}, "rope dx");
  check_mat(h.fd_pair, {-0.301169, -1.381773}, 1e-6, "rope dx (fin.diff)");
  // Position 0 turns by 0: its pair and its gradient pass unchanged.
  const Mat y = to_mat(p.rotated.data()), dx = to_mat(p.pair.grad());
  CHECK(y(0, 0) == 3);
  CHECK(y(0, 1) == -1);
  CHECK(dx(0, 0) == doctest::Approx(0.5));
  CHECK(dx(0, 1) == doctest::Approx(1));
}
