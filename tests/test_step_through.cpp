// The numbers examples/step_through prints. Part 1 pins the worked attention
// example to values computed by hand (derivations in the comments); part 2
// checks that the LayerNorm backward formula (the library's kernel, called
// directly) and the hand-applied softmax backward agree with the engine on a
// real tiny Transformer.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "examples/step_through.h"

using namespace qkv;
using namespace qkv::step;

namespace {

void check_close(const Tensor& t, const std::vector<double>& want, double tol, const char* what) {
  REQUIRE_MESSAGE(t.numel() == static_cast<int64_t>(want.size()), what);
  for (size_t i = 0; i < want.size(); ++i)
    CHECK_MESSAGE(std::fabs(double(t.data()[i]) - want[i]) <= tol,
                  what << "[" << i << "] = " << t.data()[i] << ", want " << want[i]);
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.numel() == b.numel());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::fabs(double(a.data()[i]) - double(b.data()[i])));
  return m;
}

}  // namespace

// ---- Part 1: the worked example ------------------------------------------------
// q = [1,0], K rows k_1..k_4 = [1,0],[0,1],[1,1],[0,0], V = [1,2,3,4]^T.
// Scores s_j = q . k_j = [1, 0, 1, 0] in both variants.
// The two variants' tests below share their shape on purpose: each pins its
// own numbers, derived by hand in its comment, to be checked line by line.

TEST_CASE("worked example, unscaled: softmax([1,0,1,0]) = [0.3655,0.1345,..], out 2.2689, "
          "and the gradients of s, q, K, V") {
  // w = [e, 1, e, 1] / (2e + 2):  e / 7.436564 = 0.365529,  1 / 7.436564 = 0.134471.
  // out = sum_j w_j v_j = 0.365529 (1 + 3) + 0.134471 (2 + 4) = 1.462117 + 0.806826
  //     = 2.268941.
  // dL/ds_j = w_j (v_j - out) = 0.365529 (1 - 2.268941) = -0.463835,
  //   0.134471 (2 - 2.268941) = -0.036165, 0.365529 (0.731059) = 0.267223,
  //   0.134471 (1.731059) = 0.232777.
  // dL/dq = sum_j dL/ds_j k_j = [ds_1 + ds_3, ds_2 + ds_3] = [-0.196612, 0.231058].
  // dL/dk_j = dL/ds_j q = [ds_j, 0].   dL/dv_j = w_j.
  const AttentionPass p = attention_pass(worked_example(), /*scaled=*/false);
  CHECK(p.scale == 1);
  CHECK(p.z.same_as(p.s));  // no scaling op in the graph
  check_close(p.s.data(), {1, 0, 1, 0}, 1e-6, "s");
  check_close(p.w.data(), {0.365529, 0.134471, 0.365529, 0.134471}, 1e-4, "w");
  check_close(p.out.data(), {2.268941}, 1e-4, "out");
  check_close(p.w.grad(), {1, 2, 3, 4}, 1e-5, "dL/dw");
  check_close(p.s.grad(), {-0.463835, -0.036165, 0.267223, 0.232777}, 1e-4, "dL/ds");
  check_close(p.q.grad(), {-0.196612, 0.231058}, 1e-4, "dL/dq");
  check_close(p.K.grad(), {-0.463835, 0, -0.036165, 0, 0.267223, 0, 0.232777, 0}, 1e-4, "dL/dK");
  check_close(p.V.grad(), {0.365529, 0.134471, 0.365529, 0.134471}, 1e-4, "dL/dV");
}

TEST_CASE("worked example, scaled by 1/sqrt(d_k) = 1/sqrt(2): weights, out 2.3302, and the "
          "gradients of z, s, q, K, V") {
  // z = s / sqrt(2) = [0.707107, 0, 0.707107, 0]; E = exp(0.707107) = 2.028115.
  // w = [E, 1, E, 1] / (2E + 2) = [2.028115, 1, ..] / 6.056230 = [0.334881, 0.165119, ..].
  // out = 0.334881 (1 + 3) + 0.165119 (2 + 4) = 1.339524 + 0.990714 = 2.330238.
  // dL/dz_j = w_j (v_j - out) = 0.334881 (-1.330238) = -0.445471,
  //   0.165119 (-0.330238) = -0.054529, 0.334881 (0.669762) = 0.224290,
  //   0.165119 (1.669762) = 0.275710.
  // dL/ds = dL/dz / sqrt(2) = [-0.314996, -0.038558, 0.158597, 0.194956].
  // dL/dq = [ds_1 + ds_3, ds_2 + ds_3] = [-0.156399, 0.120039].
  const AttentionPass p = attention_pass(worked_example(), /*scaled=*/true);
  CHECK(p.scale == doctest::Approx(0.707107).epsilon(1e-6));
  check_close(p.z.data(), {0.707107, 0, 0.707107, 0}, 1e-5, "z");
  check_close(p.w.data(), {0.334881, 0.165119, 0.334881, 0.165119}, 1e-4, "w");
  check_close(p.out.data(), {2.330238}, 1e-4, "out");
  check_close(p.w.grad(), {1, 2, 3, 4}, 1e-5, "dL/dw");
  check_close(p.z.grad(), {-0.445471, -0.054529, 0.224290, 0.275710}, 1e-4, "dL/dz");
  check_close(p.s.grad(), {-0.314996, -0.038558, 0.158597, 0.194956}, 1e-4, "dL/ds");
  check_close(p.q.grad(), {-0.156399, 0.120039}, 1e-4, "dL/dq");
  check_close(p.K.grad(), {-0.314996, 0, -0.038558, 0, 0.158597, 0, 0.194956, 0}, 1e-4, "dL/dK");
  check_close(p.V.grad(), {0.334881, 0.165119, 0.334881, 0.165119}, 1e-4, "dL/dV");
}

TEST_CASE("worked example: the engine's gradient of every intermediate and of q, K, V matches "
          "central finite differences, both variants") {
  // float32, h = 1e-2: truncation h^2/6 |f'''| and rounding 1e-7/h both stay
  // near 1e-5; a wrong gradient is off by >= 1e-2 here.
  for (bool scaled : {true, false}) {
    CAPTURE(scaled);
    const AttentionPass p = attention_pass(worked_example(), scaled);
    const FiniteDifferences fd = finite_differences(p);
    CHECK(max_diff(p.w.grad(), fd.w) < 2e-4);
    CHECK(max_diff(p.z.grad(), fd.z) < 2e-4);
    CHECK(max_diff(p.s.grad(), fd.s) < 2e-4);
    CHECK(max_diff(p.q.grad(), fd.q) < 2e-4);
    CHECK(max_diff(p.K.grad(), fd.K) < 2e-4);
    CHECK(max_diff(p.V.grad(), fd.V) < 2e-4);
  }
}

TEST_CASE("worked example: the printed hand formulas (dw = v, dz = w*(dw - sum(w*dw)), "
          "dq = sum ds_j k_j, dk_j = ds_j q, dv_j = w_j) equal the engine's gradients") {
  for (bool scaled : {true, false}) {
    CAPTURE(scaled);
    const AttentionPass p = attention_pass(worked_example(), scaled);
    const HandGradients h = hand_gradients(p);
    CHECK(max_diff(h.w, p.w.grad()) < 1e-6);
    CHECK(max_diff(h.z, p.z.grad()) < 1e-6);
    CHECK(max_diff(h.s, p.s.grad()) < 1e-6);
    CHECK(max_diff(h.q, p.q.grad()) < 1e-6);
    CHECK(max_diff(h.K, p.K.grad()) < 1e-6);
    CHECK(max_diff(h.V, p.V.grad()) < 1e-6);
  }
}

TEST_CASE("central_difference is exact for a quadratic and leaves its argument unchanged") {
  // F(x) = sum x_i^2 has dF/dx = 2x, and central differences have no h^2 term for it.
  const Tensor x = Tensor::from_vector({0.5, -1.5, 2});
  const Tensor g = central_difference(
      [](const Tensor& t) {
        real s = 0;
        for (int64_t i = 0; i < t.numel(); ++i) s += t.data()[i] * t.data()[i];
        return s;
      },
      x, real(0.25));
  check_close(g, {1, -3, 4}, 1e-5, "2x");
  check_close(x, {0.5, -1.5, 2}, 0, "x");
}

// ---- Part 2: the tiny Transformer ----------------------------------------------------

TEST_CASE("tiny Transformer: the LayerNorm formula dx = rstd*(dxhat - mean(dxhat) - "
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

  // The library's kernel called directly gives the engine's dx, and finite
  // differences agree with it.
  const LayerNormByFormula f = layer_norm_by_formula(r.ln_x, r.ln_out.grad(), norm3.weight.data(),
                                                     norm3.bias.data(), norm3.eps);
  CHECK(max_diff(f.dx, r.ln_dx) < 1e-5);
  REQUIRE(f.dx_fd.defined());
  CHECK(max_diff(f.dx, f.dx_fd) < (sizeof(real) == 4 ? 1e-3 : 1e-6));
  // dgamma and dbeta from the same call: norm3's parameters are used once, so
  // their .grad() is exactly this op's contribution.
  CHECK(max_diff(f.dgamma, norm3.weight.grad()) < 1e-5);
  CHECK(max_diff(f.dbeta, norm3.bias.grad()) < 1e-5);
  // A property of the formula: each row of dx sums to zero (LayerNorm output
  // does not change when the whole input row shifts).
  for (int64_t t = 0; t < 4; ++t) {
    double s = 0;
    for (int64_t j = 0; j < 8; ++j) s += r.ln_dx.data()[t * 8 + j];
    CHECK(std::fabs(s) < 1e-5);
  }
  // The printed row: the pieces agree with their definitions.
  REQUIRE(f.xhat.size() == 8);
  double mean_xhat = 0, var_xhat = 0;
  for (double v : f.xhat) mean_xhat += v / 8;
  for (double v : f.xhat) var_xhat += v * v / 8;
  CHECK(std::fabs(mean_xhat) < 1e-9);
  CHECK(var_xhat == doctest::Approx(1).epsilon(1e-3));  // 1 up to eps / var
  double mean_dxhat = 0;
  for (int64_t j = 0; j < 8; ++j)
    mean_dxhat += double(r.ln_out.grad().data()[j]) * norm3.weight.data().data()[j] / 8;
  CHECK(f.mean_dxhat == doctest::Approx(mean_dxhat).epsilon(1e-6));
}

TEST_CASE("tiny Transformer: the softmax backward dS = P*(dP - rowsum(dP*P)) equals qkv's "
          "softmax gradient, and the chain to dx_q, dx_kv equals the fused attention op") {
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
    // P from the re-run equals what the model's forward kept (last_attention).
    const Tensor& kept = attn.last_attention();  // (1,H,T,S)
    REQUIRE(kept.shape() == Shape{1, 2, 4, 3});
    CHECK(max_diff(c.P, kept.reshape({24}).slice0(head * 12, head * 12 + 12)) < 1e-6);
    for (int64_t i = 0; i < c.T; ++i) {
      double p = 0, ds = 0;
      for (int64_t j = 0; j < c.S; ++j) {
        p += c.P.data()[i * c.S + j];
        ds += c.dS.data()[i * c.S + j];
      }
      CHECK(p == doctest::Approx(1).epsilon(1e-5));
      CHECK(std::fabs(ds) < 1e-6);  // softmax backward: rows of dS sum to 0
    }
    CHECK(max_diff(c.dS, c.dS_engine) < 1e-6);
    // dS is not trivially zero: the check compares real numbers.
    CHECK(max_diff(c.dS, Tensor::zeros(c.dS.shape())) > 1e-3);
    CHECK(max_diff(c.dxq, c.dxq_engine) < 1e-5);
    CHECK(max_diff(c.dxkv, c.dxkv_engine) < 1e-5);
    // The memory feeds only this cross-attention, so the full model's
    // gradient at the encoder output is this sublayer's dx_kv.
    CHECK(max_diff(c.dxkv_engine, r.att_kv.grad().reshape({3, 8})) < 1e-5);
  }
}

TEST_CASE("tiny Transformer: the gradient-norm table lists every parameter once, in "
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
  CHECK_THROWS_AS(layer_norm_by_formula(Tensor::zeros({2, 8}), Tensor::zeros({2, 7}),
                                        Tensor::ones({8}), Tensor::zeros({8}), 1e-5),
                  Error);
}
