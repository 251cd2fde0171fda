// Multi-head attention in float64: the fused backward against finite
// differences, and the fused layer against the same maths composed from
// primitive ops, for every mask kind, self- and cross-attention.
#include <doctest/doctest.h>

#include "attention_reference.h"
#include "autograd/qkv_autograd.h"
#include "nn/attention.h"
#include "nn/attention_internal.h"
#include "test_seed.h"

using namespace qkv;
using nn::AttentionMask;
using qkv::testing::test_generator;

namespace {

struct AttentionCase {
  int64_t B, T, S, D, H;
  bool cross;
  AttentionMask mask;
  nn::detail::HeadOutputs head_outputs = nn::detail::HeadOutputs::Auto;  // what forward saves of O
  int64_t d_k = 0;  // the query/key head size; 0: D / H
};

// wq, wk (H*d_k, D) with bq, bk (H*d_k); wv, wo (D, D) with bv, bo (D).
std::vector<Var> make_params(int64_t D, int64_t E, Generator& g) {
  std::vector<Var> p;
  for (int i = 0; i < 4; ++i) {
    const int64_t rows = i < 2 ? E : D;
    p.emplace_back(Tensor::normal({rows, D}, 0, 0.5, g), true);  // W
    p.emplace_back(Tensor::normal({rows}, 0, 0.5, g), true);     // b
  }
  return p;
}

Var fused(const Var& xq, const Var& xkv, const std::vector<Var>& p, int64_t H,
          const AttentionMask& m, nn::detail::HeadOutputs head_outputs) {
  nn::AttentionOptions o;
  o.heads = H;
  o.d_k = p[0].size(0) / H;  // wq (H*d_k, D)
  o.mask = m;
  return nn::detail::multi_head_attention(xq, xkv, {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]},
                                          o, head_outputs)
      .out;
}

void run_attention_case(const AttentionCase& c) {
  Generator g = test_generator();
  Var xq(Tensor::normal({c.B, c.T, c.D}, 0, 1, g), true);
  Var xkv = c.cross ? Var(Tensor::normal({c.B, c.S, c.D}, 0, 1, g), true) : xq;
  std::vector<Var> p = make_params(c.D, c.H * (c.d_k > 0 ? c.d_k : c.D / c.H), g);
  std::vector<Var> inputs = c.cross ? std::vector<Var>{xq, xkv} : std::vector<Var>{xq};
  inputs.insert(inputs.end(), p.begin(), p.end());
  const size_t np = c.cross ? 2 : 1;
  auto split = [&](const std::vector<Var>& v, bool composed) {
    std::vector<Var> ps(v.begin() + np, v.end());
    const Var& a = v[0];
    const Var& b = c.cross ? v[1] : v[0];
    return composed ? testing::composed_attention(a, b, ps, c.H, c.mask)
                    : fused(a, b, ps, c.H, c.mask, c.head_outputs);
  };

  // 1. finite differences
  auto r = gradcheck([&](const std::vector<Var>& v) { return split(v, false); }, inputs);
  INFO(r.report);
  CHECK(r.ok);

  // 2. fused == composed: outputs and every gradient
  Tensor up = Tensor::normal({c.B, c.T, c.D}, 0, 1, g);
  Var yf = split(inputs, false);
  yf.backward(up);
  std::vector<Tensor> gf;
  for (auto& v : inputs) {
    gf.push_back(v.grad().clone());
    v.clear_grad();
  }
  Var yc = split(inputs, true);
  yc.backward(up);
  CHECK(max_abs_diff(yf.data(), yc.data()) < 1e-12);
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("input " << i);
    CHECK(max_abs_diff(gf[i], inputs[i].grad()) < 1e-10);
  }
}

}  // namespace

TEST_CASE(
    "attention grad: self-attention without a mask matches finite differences and the composed "
    "ops") {
  run_attention_case({2, 4, 4, 6, 2, false, AttentionMask::none()});
}
TEST_CASE("attention grad: causal self-attention") {
  run_attention_case({2, 5, 5, 4, 2, false, AttentionMask::causal_mask()});
}
TEST_CASE("attention grad: self-attention with key padding") {
  run_attention_case({2, 5, 5, 4, 2, false, AttentionMask::padding({5, 3})});
}
TEST_CASE("attention grad: causal + padding self-attention (decoder)") {
  run_attention_case({3, 4, 4, 6, 3, false, AttentionMask::causal_padding({4, 2, 1})});
}
TEST_CASE("attention grad: cross-attention with T != S and source padding") {
  run_attention_case({2, 3, 5, 4, 2, true, AttentionMask::padding({5, 2})});
}
TEST_CASE("attention grad: arbitrary boolean mask (B,T,S), including a fully masked row") {
  AttentionMask m;
  m.mask = Tensor::zeros({2, 3, 4});
  // sequence 0: hide keys 1 and 3 of query 0; sequence 1: hide every key of query 2.
  m.mask.at({0, 0, 1}) = 1;
  m.mask.at({0, 0, 3}) = 1;
  for (int64_t j = 0; j < 4; ++j) m.mask.at({1, 2, j}) = 1;
  run_attention_case({2, 3, 4, 4, 2, true, m});
}
TEST_CASE("attention grad: one head equals plain scaled dot-product attention") {
  run_attention_case({1, 3, 3, 4, 1, false, AttentionMask::none()});
}
// The fused op keeps the head outputs O for dWo (every case above: Auto keeps
// them at sizes this small, under 1 MiB) or recomputes them from P and V in
// backward. These ask for each path explicitly: Recompute twice, and Keep on
// a shape with D > H*S.
TEST_CASE("attention grad: head outputs recomputed in backward, self- and cross-attention") {
  run_attention_case(
      {2, 3, 3, 8, 2, false, AttentionMask::causal_mask(), nn::detail::HeadOutputs::Recompute});
  run_attention_case(
      {2, 3, 2, 8, 2, true, AttentionMask::padding({2, 1}), nn::detail::HeadOutputs::Recompute});
  run_attention_case(
      {2, 3, 2, 8, 2, true, AttentionMask::padding({2, 1}), nn::detail::HeadOutputs::Keep});
}

// Table 3 row B: the query/key head size d_k set apart from d_v = D / H, so
// Q, K are (B*T, H*d_k) and V, O (B*T, D): smaller and larger than d_v, every
// mask kind, self- and cross-attention, both memory policies for O.
TEST_CASE("attention grad with d_k != D/H: every mask kind, self- and cross-attention") {
  using nn::detail::HeadOutputs;
  // D 4, H 2: d_v 2, d_k 3 (larger) and 1 (smaller)
  run_attention_case({2, 4, 4, 4, 2, false, AttentionMask::none(), HeadOutputs::Auto, 3});
  run_attention_case({2, 5, 5, 4, 2, false, AttentionMask::causal_mask(), HeadOutputs::Auto, 1});
  run_attention_case({2, 5, 5, 4, 2, false, AttentionMask::padding({5, 3}), HeadOutputs::Auto, 3});
  run_attention_case(
      {3, 4, 4, 6, 3, false, AttentionMask::causal_padding({4, 2, 1}), HeadOutputs::Auto, 1});
  run_attention_case({2, 3, 5, 4, 2, true, AttentionMask::padding({5, 2}), HeadOutputs::Auto, 3});
  AttentionMask m;
  m.mask = Tensor::zeros({2, 3, 4});
  m.mask.at({0, 0, 1}) = 1;
  for (int64_t j = 0; j < 4; ++j) m.mask.at({1, 2, j}) = 1;  // a fully masked row
  run_attention_case({2, 3, 4, 4, 2, true, m, HeadOutputs::Auto, 1});
  run_attention_case(
      {2, 3, 3, 8, 2, false, AttentionMask::causal_mask(), HeadOutputs::Recompute, 3});
  run_attention_case(
      {2, 3, 2, 8, 2, true, AttentionMask::padding({2, 1}), HeadOutputs::Recompute, 5});
  run_attention_case(
      {1, 3, 3, 4, 1, false, AttentionMask::none(), HeadOutputs::Keep, 2});  // one head
}
