// T5's relative position bias inside the fused attention op, in float64: the
// fused backward (the scatter-add of dZ into the buckets) against finite
// differences for every input, weight and the bias table, and the fused
// layer against the same maths composed from primitive ops, the bias
// gathered into the scores as a product of a constant one-hot (T*S, buckets)
// matrix with the table's transpose; both kernels, bidirectional and causal
// buckets, padding, grouped-query attention, and a query offset.
#include <doctest/doctest.h>

#include "attention_reference.h"
#include "autograd/qkv_autograd.h"
#include "fused_vs_composed.h"
#include "nn/attention.h"
#include "nn/relative_bias.h"
#include "test_seed.h"

using namespace qkv;
using nn::AttentionKernel;
using nn::AttentionMask;
using qkv::testing::test_generator;

namespace {

struct RelativeCase {
  int64_t B, T, S, D, H, Hkv;
  bool bidirectional;
  int64_t buckets, max_distance;
  AttentionMask mask;
  bool cross = false;
  int64_t pos0 = 0;  // query i at position pos0 + i
};

std::vector<Var> make_params(const RelativeCase& c, Generator& g) {
  const int64_t dk = c.D / c.H;
  const int64_t rows[4] = {c.H * dk, c.Hkv * dk, c.Hkv * dk, c.D};
  std::vector<Var> p;
  for (int i = 0; i < 4; ++i) {
    p.emplace_back(Tensor::normal({rows[i], c.D}, 0, 0.5, g), true);  // W
    p.emplace_back(Tensor::normal({rows[i]}, 0, 0.5, g), true);       // b
  }
  p.emplace_back(Tensor::normal({c.H, c.buckets}, 0, 1, g), true);  // the table (H, buckets)
  return p;
}

Var fused(const Var& xq, const Var& xkv, const std::vector<Var>& p, const RelativeCase& c,
          AttentionKernel kernel) {
  nn::AttentionOptions o;
  o.heads = c.H;
  o.kv_heads = c.Hkv;
  o.mask = c.mask;
  o.kernel = kernel;
  o.rel_bias = p[8];
  o.rel_bidirectional = c.bidirectional;
  o.rel_max_distance = c.max_distance;
  o.rel_pos0 = c.pos0;
  return nn::multi_head_attention(xq, xkv, {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]}, o).out;
}

// The bias (1, H, T, S) from primitive ops: one-hot M (T*S, buckets), M[(i,j),
// k] = 1 when bucket(j - i - pos0) = k; M table^T (T*S, H), laid out as scores.
Var composed_bias(const Var& table, const RelativeCase& c) {
  const int64_t T = c.T, S = c.S, nb = c.buckets;
  Tensor M = Tensor::zeros({T * S, nb});
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S; ++j)
      M.data()[(i * S + j) * nb + nn::relative_position_bucket(j - i - c.pos0, c.bidirectional, nb,
                                                               c.max_distance)] = 1;
  Var bias = matmul(Var(M), table, false, true);                // (T*S, nb) x (nb, H) -> (T*S, H)
  bias = permute(reshape(bias, {1, T, S, c.H}), {0, 3, 1, 2});  // (1, H, T, S)
  return bias;
}

void run_relative_case(const RelativeCase& c) {
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
      if (!composed) return fused(a, b, ps, c, k);
      return testing::composed_gqa_attention(a, b, ps, c.H, c.Hkv, 0, 0, c.mask,
                                             composed_bias(ps[8], c));
    };
    // 1. finite differences, every input, weight and the table
    auto r = gradcheck([&](const std::vector<Var>& v) { return split(v, false); }, inputs);
    INFO(r.report);
    CHECK(r.ok);
    // 2. fused == composed: outputs and every gradient, the table's included
    testing::check_fused_equals_composed([&](const std::vector<Var>& v) { return split(v, false); },
                                         [&](const std::vector<Var>& v) { return split(v, true); },
                                         inputs, 1e-10);
  }
}

}  // namespace

// buckets 8, max distance 6: bidirectional 2 exact + 2 logarithmic per
// direction, causal 4 exact + 4 logarithmic; T, S up to 7 reach every kind.
TEST_CASE(
    "relative bias grad: bidirectional buckets, no mask and key padding, every input and "
    "the table") {
  run_relative_case({2, 7, 7, 8, 2, 2, true, 8, 6, AttentionMask::none()});
  run_relative_case({2, 6, 6, 8, 2, 2, true, 8, 6, AttentionMask::padding({6, 3})});
}
TEST_CASE("relative bias grad: causal buckets, causal and causal + padding") {
  run_relative_case({2, 7, 7, 8, 2, 2, false, 8, 6, AttentionMask::causal_mask()});
  run_relative_case({3, 5, 5, 8, 2, 2, false, 6, 4, AttentionMask::causal_padding({5, 2, 1})});
}
TEST_CASE("relative bias grad: grouped-query attention (1 and 2 key/value heads of 4)") {
  run_relative_case({2, 6, 6, 8, 4, 1, true, 8, 6, AttentionMask::padding({6, 4})});
  run_relative_case({2, 6, 6, 8, 4, 2, false, 8, 6, AttentionMask::causal_padding({4, 6})});
}
TEST_CASE("relative bias grad: T != S and a query offset (the KV cache's new positions)") {
  run_relative_case({2, 3, 7, 8, 2, 2, false, 8, 6, AttentionMask::padding({7, 5}), true, 4});
  run_relative_case({1, 4, 6, 8, 2, 1, true, 8, 6, AttentionMask::none(), true, 2});
}
