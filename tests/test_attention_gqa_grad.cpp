// Grouped-query attention and rotary positions inside the fused attention op,
// in float64: the fused backward against finite differences for every input
// and weight, and the fused layer against the same maths composed from
// primitive ops (nn::rope on the projected Q and K, each key/value head
// repeated over its group by a 0/1 product, the composed heads of
// tests/attention_reference.h), for the standard and memory-efficient
// kernels and every mask kind.
#include <doctest/doctest.h>

#include "attention_reference.h"
#include "autograd/qkv_autograd.h"
#include "errors.h"
#include "fused_vs_composed.h"
#include "nn/attention.h"
#include "test_seed.h"

using namespace qkv;
using nn::AttentionKernel;
using nn::AttentionMask;
using qkv::testing::test_generator;

namespace {

struct GqaCase {
  int64_t B, T, S, D, H, Hkv;
  real rope_base;  // 0: no rotation
  AttentionMask mask;
  bool cross = false;
  int64_t d_k = 0;  // 0: D / H
  int64_t pos0 = 0;
};

// wq (H*d_k, D), bq; wk (Hkv*d_k, D), bk; wv (Hkv*d_v, D), bv; wo (D, D), bo.
std::vector<Var> make_params(const GqaCase& c, Generator& g) {
  const int64_t dk = c.d_k > 0 ? c.d_k : c.D / c.H, dv = c.D / c.H;
  const int64_t rows[4] = {c.H * dk, c.Hkv * dk, c.Hkv * dv, c.D};
  std::vector<Var> p;
  for (int i = 0; i < 4; ++i) {
    p.emplace_back(Tensor::normal({rows[i], c.D}, 0, 0.5, g), true);  // W
    p.emplace_back(Tensor::normal({rows[i]}, 0, 0.5, g), true);       // b
  }
  return p;
}

Var fused(const Var& xq, const Var& xkv, const std::vector<Var>& p, const GqaCase& c,
          AttentionKernel kernel) {
  nn::AttentionOptions o;
  o.heads = c.H;
  o.kv_heads = c.Hkv;
  o.d_k = c.d_k;
  o.rope_base = c.rope_base;
  o.rope_pos0 = c.pos0;
  o.mask = c.mask;
  o.kernel = kernel;
  return nn::multi_head_attention(xq, xkv, {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]}, o).out;
}

void run_gqa_case(const GqaCase& c) {
  for (AttentionKernel k : {AttentionKernel::Standard, AttentionKernel::MemoryEfficient}) {
    INFO("kernel " << nn::to_string(k));
    Generator g = test_generator();
    Var xq(Tensor::normal({c.B, c.T, c.D}, 0, 1, g), true);
    Var xkv = c.cross ? Var(Tensor::normal({c.B, c.S, c.D}, 0, 1, g), true) : xq;
    std::vector<Var> p = make_params(c, g);
    std::vector<Var> inputs = c.cross ? std::vector<Var>{xq, xkv} : std::vector<Var>{xq};
    inputs.insert(inputs.end(), p.begin(), p.end());
    const size_t np = c.cross ? 2 : 1;
    auto split = [&](const std::vector<Var>& v, bool composed) {
      std::vector<Var> ps(v.begin() + np, v.end());
      const Var& a = v[0];
      const Var& b = c.cross ? v[1] : v[0];
      return composed ? testing::composed_gqa_attention(a, b, ps, c.H, c.Hkv, c.rope_base, c.pos0,
                                                        c.mask)
                      : fused(a, b, ps, c, k);
    };
    // 1. finite differences, every input and weight
    auto r = gradcheck([&](const std::vector<Var>& v) { return split(v, false); }, inputs);
    INFO(r.report);
    CHECK(r.ok);
    // 2. fused == composed: outputs and every gradient
    testing::check_fused_equals_composed([&](const std::vector<Var>& v) { return split(v, false); },
                                         [&](const std::vector<Var>& v) { return split(v, true); },
                                         inputs, 1e-10);
  }
}

}  // namespace

TEST_CASE(
    "gqa grad: multi-query attention (1 key/value head of 4) matches finite differences and the "
    "composed ops, causal") {
  run_gqa_case({2, 5, 5, 8, 4, 1, 0, AttentionMask::causal_mask()});
}
TEST_CASE("gqa grad: 2 key/value heads of 4, key padding, and causal + padding") {
  run_gqa_case({2, 5, 5, 8, 4, 2, 0, AttentionMask::padding({5, 3})});
  run_gqa_case({3, 4, 4, 8, 4, 2, 0, AttentionMask::causal_padding({4, 2, 1})});
}
TEST_CASE("gqa grad: cross-attention with T != S, 2 key/value heads of 4, source padding") {
  run_gqa_case({2, 3, 5, 8, 4, 2, 0, AttentionMask::padding({5, 2}), true});
}
TEST_CASE("gqa grad: d_k != D/H with 2 key/value heads of 4") {
  run_gqa_case({2, 4, 4, 8, 4, 2, 0, AttentionMask::causal_mask(), false, 4});
}
TEST_CASE("rope grad: rotary positions inside attention, every head, causal and padding") {
  run_gqa_case({2, 5, 5, 8, 2, 2, 10000, AttentionMask::causal_mask()});
  run_gqa_case({2, 5, 5, 8, 2, 2, 100, AttentionMask::causal_padding({5, 2}), false, 0, 3});
  run_gqa_case({1, 4, 4, 8, 2, 2, 10, AttentionMask::none(), false, 6});  // d_k 6 != D/H
}
TEST_CASE("gqa + rope grad: both together, 1 and 2 key/value heads of 4, causal + padding") {
  run_gqa_case({2, 5, 5, 8, 4, 1, 10000, AttentionMask::causal_padding({5, 4})});
  run_gqa_case({2, 5, 5, 8, 4, 2, 10, AttentionMask::causal_padding({3, 5}), false, 0, 7});
}
TEST_CASE("gqa: kv_heads = heads is the plain op, bit for bit, on both kernels") {
  Generator g = test_generator();
  Var x(Tensor::normal({2, 4, 8}, 0, 1, g), true);
  const GqaCase c{2, 4, 4, 8, 4, 4, 0, AttentionMask::causal_mask()};
  std::vector<Var> p = make_params(c, g);
  for (AttentionKernel k : {AttentionKernel::Standard, AttentionKernel::MemoryEfficient}) {
    GqaCase zero = c;
    zero.Hkv = 0;
    CHECK(max_abs_diff(fused(x, x, p, c, k).data(), fused(x, x, p, zero, k).data()) == 0);
  }
}
