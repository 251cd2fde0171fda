// The memory-efficient, sparse and linear attention kernels in float64: each
// backward against finite differences, and each against its reference with
// the same maths: the memory-efficient kernel against the standard one, the
// sparse kernel against the standard one with the pattern as a mask, the
// linear kernel against the same maths composed from primitive ops. Sizes
// that cross the blocks (128 query rows, 128 keys; the sparse band pass: 64
// rows) and the linear kernel's chunks (64 rows).
#include <doctest/doctest.h>

#include "attention_kernels.h"
#include "autograd/qkv_autograd.h"
#include "fused_vs_composed.h"
#include "nn/attention.h"
#include "test_seed.h"

using namespace qkv;
using nn::AttentionKernel;
using nn::AttentionMask;
using nn::SparsePattern;
using qkv::testing::attention_with;
using qkv::testing::test_generator;

namespace {

struct Inputs {
  std::vector<Var> all;  // xq [, xkv], then the 8 parameters
  bool cross;
};

// E = H*d_k: wq, wk (E, D) with bq, bk (E); wv, wo (D, D) with bv, bo (D).
Inputs make_inputs(int64_t B, int64_t T, int64_t S, int64_t D, int64_t E, bool cross,
                   Generator& g) {
  Inputs in{{}, cross};
  in.all.emplace_back(Tensor::normal({B, T, D}, 0, 1, g), true);
  if (cross) in.all.emplace_back(Tensor::normal({B, S, D}, 0, 1, g), true);
  for (int i = 0; i < 4; ++i) {
    const int64_t rows = i < 2 ? E : D;
    in.all.emplace_back(Tensor::normal({rows, D}, 0, 0.5, g), true);  // W
    in.all.emplace_back(Tensor::normal({rows}, 0, 0.5, g), true);     // b
  }
  return in;
}

// f(xq, xkv, params) from the flat input list
testing::VarFn call(bool cross,
                    std::function<Var(const Var&, const Var&, const std::vector<Var>&)> f) {
  return [cross, f](const std::vector<Var>& v) {
    const size_t np = cross ? 2 : 1;
    std::vector<Var> p(v.begin() + np, v.end());
    return f(v[0], cross ? v[1] : v[0], p);
  };
}

// gradcheck of kernel k, then k against reference r (outputs and every gradient).
// d_k: the query/key head size, 0 for D / H (the paper's base); the d_k
// tests set it apart (Table 3 row B).
void check_kernel(int64_t B, int64_t T, int64_t S, int64_t D, int64_t H, bool cross,
                  const AttentionMask& mask, AttentionKernel k, const testing::VarFn& reference,
                  SparsePattern sp = {}, bool finite_differences = true, int64_t d_k = 0) {
  Generator g = test_generator();
  Inputs in = make_inputs(B, T, S, D, H * (d_k > 0 ? d_k : D / H), cross, g);
  auto fused = call(cross, [&](const Var& a, const Var& b, const std::vector<Var>& p) {
    return attention_with(a, b, p, H, mask, k, sp);
  });
  if (finite_differences) {
    auto r = gradcheck(fused, in.all);
    INFO(r.report);
    CHECK(r.ok);
  }
  testing::check_fused_equals_composed(fused, reference, in.all, 1e-10);
}

testing::VarFn standard(bool cross, int64_t H, const AttentionMask& mask) {
  return call(cross, [=](const Var& a, const Var& b, const std::vector<Var>& p) {
    return attention_with(a, b, p, H, mask, AttentionKernel::Standard);
  });
}

void memory_efficient_case(int64_t B, int64_t T, int64_t S, int64_t D, int64_t H, bool cross,
                           const AttentionMask& mask, bool finite_differences = true,
                           int64_t d_k = 0) {
  check_kernel(B, T, S, D, H, cross, mask, AttentionKernel::MemoryEfficient,
               standard(cross, H, mask), {}, finite_differences, d_k);
}

void sparse_case(int64_t B, int64_t T, int64_t S, int64_t D, int64_t H, bool cross,
                 const AttentionMask& mask, SparsePattern sp, bool finite_differences = true,
                 int64_t d_k = 0) {
  AttentionMask dense;
  dense.mask = testing::sparse_as_mask(sp, mask, B, T, S);
  check_kernel(B, T, S, D, H, cross, mask, AttentionKernel::Sparse, standard(cross, H, dense), sp,
               finite_differences, d_k);
}

void linear_case(int64_t B, int64_t T, int64_t S, int64_t D, int64_t H, bool cross,
                 const AttentionMask& mask, bool finite_differences = true, int64_t d_k = 0) {
  auto composed = call(cross, [=](const Var& a, const Var& b, const std::vector<Var>& p) {
    return testing::composed_linear_attention(a, b, p, H, mask);
  });
  check_kernel(B, T, S, D, H, cross, mask, AttentionKernel::Linear, composed, {},
               finite_differences, d_k);
}

}  // namespace

TEST_CASE(
    "memory-efficient attention grad: finite differences and equal to the standard kernel, every "
    "mask kind") {
  memory_efficient_case(2, 5, 5, 4, 2, false, AttentionMask::none());
  memory_efficient_case(2, 5, 5, 4, 2, false, AttentionMask::causal_mask());
  memory_efficient_case(3, 4, 4, 6, 3, false, AttentionMask::causal_padding({4, 2, 0}));
  memory_efficient_case(2, 3, 5, 4, 2, true, AttentionMask::padding({5, 2}));
  AttentionMask m;
  m.mask = Tensor::zeros({2, 3, 4});
  m.mask.at({0, 0, 1}) = 1;
  m.mask.at({0, 0, 3}) = 1;
  for (int64_t j = 0; j < 4; ++j) m.mask.at({1, 2, j}) = 1;  // a fully masked row
  memory_efficient_case(2, 3, 4, 4, 2, true, m);
}

TEST_CASE(
    "memory-efficient attention equals the standard kernel across several query and key blocks") {
  // T = 150: two query blocks of 128; S = 300: three key blocks of 128
  memory_efficient_case(1, 150, 150, 8, 2, false, AttentionMask::causal_padding({140}), false);
  memory_efficient_case(2, 70, 300, 4, 1, true, AttentionMask::padding({300, 129}), false);
}

TEST_CASE(
    "sparse attention grad: finite differences and equal to dense attention with the pattern as "
    "a mask") {
  sparse_case(2, 12, 12, 4, 2, false, AttentionMask::none(), {3, 4});
  sparse_case(2, 12, 12, 4, 2, false, AttentionMask::causal_padding({12, 7}), {2, 5});
  sparse_case(1, 9, 9, 4, 2, false, AttentionMask::causal_mask(), {4, 0});  // no global positions
  sparse_case(2, 7, 10, 4, 2, true, AttentionMask::padding({10, 6}), {3, 3});
}

TEST_CASE("sparse attention equals dense attention with the pattern as a mask across blocks") {
  sparse_case(1, 200, 200, 8, 2, false, AttentionMask::causal_mask(), {20, 16}, false);
  sparse_case(2, 150, 150, 4, 1, false, AttentionMask::padding({150, 97}), {70, 33}, false);
  sparse_case(1, 140, 140, 4, 1, false, AttentionMask::none(), {140, 0}, false);  // w = S: dense
}

TEST_CASE(
    "linear attention grad: finite differences and equal to the composed ops, non-causal and "
    "causal") {
  linear_case(2, 5, 5, 4, 2, false, AttentionMask::none());
  linear_case(2, 5, 5, 4, 2, false, AttentionMask::causal_mask());
  linear_case(3, 4, 4, 6, 3, false, AttentionMask::causal_padding({4, 2, 0}));
  linear_case(2, 3, 5, 4, 2, true, AttentionMask::padding({5, 2}));
}

TEST_CASE("causal linear attention equals the composed ops across several chunks") {
  linear_case(1, 150, 150, 8, 2, false, AttentionMask::causal_padding({131}), false);
  linear_case(2, 70, 130, 4, 1, true, AttentionMask::padding({130, 65}), false);
}

// Table 3 row B: the query/key head size d_k apart from d_v = D / H (larger
// and smaller), each kernel against its reference, every mask kind.
TEST_CASE(
    "memory-efficient attention grad with d_k != D/H: finite differences and equal to the "
    "standard kernel") {
  for (int64_t d_k : {3, 1}) {
    CAPTURE(d_k);
    memory_efficient_case(2, 5, 5, 4, 2, false, AttentionMask::none(), true, d_k);
    memory_efficient_case(2, 5, 5, 4, 2, false, AttentionMask::causal_mask(), true, d_k);
    memory_efficient_case(3, 4, 4, 6, 3, false, AttentionMask::causal_padding({4, 2, 0}), true,
                          d_k);
    memory_efficient_case(2, 3, 5, 4, 2, true, AttentionMask::padding({5, 2}), true, d_k);
    AttentionMask m;
    m.mask = Tensor::zeros({2, 3, 4});
    m.mask.at({0, 0, 1}) = 1;
    for (int64_t j = 0; j < 4; ++j) m.mask.at({1, 2, j}) = 1;  // a fully masked row
    memory_efficient_case(2, 3, 4, 4, 2, true, m, true, d_k);
  }
  // across blocks: T 150 (two query blocks), S 300 (three key blocks)
  memory_efficient_case(1, 150, 150, 8, 2, false, AttentionMask::causal_padding({140}), false, 5);
  memory_efficient_case(2, 70, 300, 4, 1, true, AttentionMask::padding({300, 129}), false, 3);
}

TEST_CASE(
    "sparse attention grad with d_k != D/H: finite differences and equal to dense attention with "
    "the pattern as a mask") {
  for (int64_t d_k : {3, 1}) {
    CAPTURE(d_k);
    sparse_case(2, 12, 12, 4, 2, false, AttentionMask::none(), {3, 4}, true, d_k);
    sparse_case(2, 12, 12, 4, 2, false, AttentionMask::causal_padding({12, 7}), {2, 5}, true, d_k);
    sparse_case(1, 9, 9, 4, 2, false, AttentionMask::causal_mask(), {4, 0}, true, d_k);
    sparse_case(2, 7, 10, 4, 2, true, AttentionMask::padding({10, 6}), {3, 3}, true, d_k);
  }
  // across the band pass's blocks
  sparse_case(1, 200, 200, 8, 2, false, AttentionMask::causal_mask(), {20, 16}, false, 6);
}

TEST_CASE(
    "linear attention grad with d_k != D/H: finite differences and equal to the composed ops, "
    "non-causal and causal") {
  for (int64_t d_k : {3, 1}) {
    CAPTURE(d_k);
    linear_case(2, 5, 5, 4, 2, false, AttentionMask::none(), true, d_k);
    linear_case(2, 5, 5, 4, 2, false, AttentionMask::causal_mask(), true, d_k);
    linear_case(3, 4, 4, 6, 3, false, AttentionMask::causal_padding({4, 2, 0}), true, d_k);
    linear_case(2, 3, 5, 4, 2, true, AttentionMask::padding({5, 2}), true, d_k);
  }
  // across the causal kernel's chunks
  linear_case(1, 150, 150, 8, 2, false, AttentionMask::causal_padding({131}), false, 6);
  linear_case(2, 70, 130, 4, 1, true, AttentionMask::padding({130, 65}), false, 3);
}
