// The attention kernels in float32: the memory-efficient kernel equals the
// standard one to float32 rounding at sizes of many blocks, the sparse kernel
// equals dense attention with its pattern as a mask, Auto's choice by the
// memory budget, the module's kernel switch, and the errors for bad settings.
// (Gradients to 1e-10 against the references: tests/test_attention_kernels_grad.cpp.)
#include <doctest/doctest.h>

#include "attention_kernels.h"
#include "compare.h"
#include "fixture.h"
#include "autograd/qkv_autograd.h"
#include "generation/kv_cache.h"
#include "models/gpt.h"
#include "nn/attention.h"
#include "nn/attention_internal.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::test_generator;

namespace {

std::vector<Var> params(int64_t D, Generator& g) {
  std::vector<Var> p;
  for (int i = 0; i < 4; ++i) {
    p.emplace_back(Tensor::normal({D, D}, 0, 0.3, g), true);
    p.emplace_back(Tensor::normal({D}, 0, 0.3, g), true);
  }
  return p;
}

// Output and gradients of x and of every parameter, for one kernel.
std::vector<Tensor> run(const Tensor& x0, std::vector<Var>& p, const Tensor& up,
                        const AttentionOptions& o) {
  Var x(x0.clone(), true);
  for (Var& v : p) v.clear_grad();
  AttentionResult r =
      multi_head_attention(x, x, {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]}, o);
  r.out.backward(up);
  std::vector<Tensor> out{r.out.data().clone(), x.grad().clone()};
  for (Var& v : p) out.push_back(v.grad().clone());
  return out;
}

double largest(const Tensor& t) {
  double big = 0;
  for (int64_t k = 0; k < t.numel(); ++k) big = std::max(big, double(std::abs(t.data()[k])));
  return big;
}

// Largest |a - b| relative to the largest |b| of each tensor. {out, dx, dWq,
// dbq, dWk, dbk, ...}: dbk is 0 in exact arithmetic (adding q . bk to every
// score of a row leaves the softmax unchanged), so both kernels' dbk are
// float32 rounding noise; it is measured against dWk's scale instead.
void check_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    const double big = largest(b[i == 5 ? 4 : i]);
    CHECK(max_abs_diff(a[i], b[i]) <= tol * big);
  }
}

}  // namespace

TEST_CASE(
    "memory-efficient attention equals the standard kernel to float32 rounding at T = 300, causal "
    "and padded") {
  Generator g = test_generator();
  const int64_t B = 2, T = 300, D = 64;
  std::vector<Var> p = params(D, g);
  const Tensor x = Tensor::normal({B, T, D}, 0, 1, g), up = Tensor::normal({B, T, D}, 0, 1, g);
  for (const AttentionMask& m :
       {AttentionMask::causal_padding({300, 211}), AttentionMask::none()}) {
    AttentionOptions o;
    o.heads = 2;
    o.mask = m;
    const std::vector<Tensor> want = run(x, p, up, o);
    o.kernel = AttentionKernel::MemoryEfficient;
    check_same(run(x, p, up, o), want, 2e-5);
  }
}

// PyTorch's nn.MultiheadAttention with the pattern (window 3, global every 4),
// causal and key padding as masks: tests/pytorch/make_fixtures.py,
// make_attention_kernels.
TEST_CASE(
    "sparse attention matches torch.nn.MultiheadAttention with the pattern as its attn_mask: "
    "output and every gradient") {
  TensorFile f = load_fixture("attention_kernels.safetensors");
  MultiHeadAttention mha(8, 2);
  load_params(mha, f, "mha_sparse.");
  mha.kernel = AttentionKernel::Sparse;
  mha.sparse = {3, 4};
  Var x(f.get("mha_sparse.in.x").clone(), true);
  const std::vector<int64_t> lens = testing::ids_of(f.get("mha_sparse.in.lens"));
  Var y = mha.forward(x, x, AttentionMask::causal_padding(lens));
  testing::check_close(y.data(), f.get("mha_sparse.out.y"), "mha_sparse out.y");
  y.backward(f.get("mha_sparse.in.upstream"));
  testing::check_close(x.grad(), f.get("mha_sparse.grad.x"), "mha_sparse grad.x");
  testing::check_param_grads(mha.named_parameters(), f, "mha_sparse.grad.", "mha_sparse");
}

TEST_CASE("sparse attention equals dense attention with its pattern as a mask in float32") {
  Generator g = test_generator();
  const int64_t B = 1, T = 256, D = 32;
  std::vector<Var> p = params(D, g);
  const Tensor x = Tensor::normal({B, T, D}, 0, 1, g), up = Tensor::normal({B, T, D}, 0, 1, g);
  AttentionOptions o;
  o.heads = 2;
  o.mask = AttentionMask::causal_mask();
  o.kernel = AttentionKernel::Sparse;
  o.sparse = {32, 16};
  const std::vector<Tensor> got = run(x, p, up, o);
  AttentionOptions dense;
  dense.heads = 2;
  dense.mask.mask = testing::sparse_as_mask(o.sparse, o.mask, B, T, T);
  check_same(got, run(x, p, up, dense), 2e-5);
  // and the pattern matters: without it the output differs
  AttentionOptions full;
  full.heads = 2;
  full.mask = AttentionMask::causal_mask();
  CHECK(max_abs_diff(got[0], run(x, p, up, full)[0]) > 1e-3);
}

TEST_CASE(
    "Auto runs the standard kernel when P fits the memory budget, the memory-efficient one when "
    "not") {
  Generator g = test_generator();
  std::vector<Var> p = params(8, g);
  Var x(Tensor::normal({1, 40, 8}, 0, 1, g), true);
  AttentionOptions o;
  o.heads = 2;
  o.kernel = AttentionKernel::Auto;
  const AttentionWeights w{p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]};
  CHECK(multi_head_attention(x, x, w, o).kernel == AttentionKernel::Standard);  // no budget
  const int64_t p_bytes = 1 * 2 * 40 * 40 * int64_t(sizeof(real));
  o.memory_budget = std::max(p_bytes, nn::detail::kBlockBytes);
  CHECK(multi_head_attention(x, x, w, o).kernel == AttentionKernel::Standard);
  Var big(Tensor::normal({1, 400, 8}, 0, 1, g), true);  // P: 1.25 MB in float32
  o.memory_budget = nn::detail::kBlockBytes;
  CHECK(multi_head_attention(big, big, w, o).kernel == AttentionKernel::MemoryEfficient);
}

TEST_CASE("MultiHeadAttention runs the kernel it is set to, and every kernel trains through it") {
  Generator g = test_generator();
  MultiHeadAttention mha(16, 2, true, g);
  Var x(Tensor::normal({2, 20, 16}, 0, 1, g), true);
  const Var y_std = mha.forward(x, x, AttentionMask::causal_mask());
  mha.kernel = AttentionKernel::MemoryEfficient;
  const Var y_me = mha.forward(x, x, AttentionMask::causal_mask());
  CHECK(max_abs_diff(y_std.data(), y_me.data()) < 1e-5);
  mha.kernel = AttentionKernel::Sparse;
  mha.sparse = {4, 8};
  const Var y_sp = mha.forward(x, x, AttentionMask::causal_mask());
  CHECK(max_abs_diff(y_std.data(), y_sp.data()) > 1e-4);  // a narrower pattern: other numbers
  mha.kernel = AttentionKernel::Linear;
  Var y_lin = mha.forward(x, x, AttentionMask::causal_mask());
  sum(y_lin).backward();
  CHECK(mha.w_q->weight.grad().defined());
}

TEST_CASE("attention kernels refuse bad settings with one line naming the op and the sizes") {
  Generator g = test_generator();
  std::vector<Var> p = params(8, g);
  const AttentionWeights w{p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]};
  Var x(Tensor::normal({1, 10, 8}, 0, 1, g), true);
  Var m(Tensor::normal({1, 6, 8}, 0, 1, g), true);
  AttentionOptions o;
  o.heads = 2;
  o.kernel = AttentionKernel::MemoryEfficient;
  o.memory_budget = nn::detail::kBlockBytes - 1;
  CHECK_THROWS_WITH_AS(multi_head_attention(x, x, w, o), doctest::Contains("cannot hold one"),
                       Error);
  o.memory_budget = 0;
  o.kernel = AttentionKernel::Sparse;
  o.sparse = {0, 4};
  CHECK_THROWS_WITH_AS(multi_head_attention(x, x, w, o),
                       doctest::Contains("sparse window 0 is outside [1, S]"), Error);
  o.sparse = {11, 4};
  CHECK_THROWS_WITH_AS(multi_head_attention(x, x, w, o),
                       doctest::Contains("(B,H,T,S) = (1,2,10,10)"), Error);
  o.sparse = {3, 4};
  o.mask.mask = Tensor::zeros({10, 10});
  CHECK_THROWS_WITH_AS(multi_head_attention(x, x, w, o), doctest::Contains("not a mask tensor"),
                       Error);
  o.mask = AttentionMask::causal_mask();
  o.kernel = AttentionKernel::Linear;
  CHECK_THROWS_WITH_AS(multi_head_attention(x, m, w, o), doctest::Contains("needs T == S"), Error);
  o.kernel = AttentionKernel::MemoryEfficient;
  o.keep_probs = true;
  CHECK_THROWS_WITH_AS(multi_head_attention(x, x, w, o),
                       doctest::Contains("keep_probs needs the standard kernel"), Error);
  CHECK_THROWS_WITH_AS(attention_kernel_from_string("dense"),
                       doctest::Contains("unknown kernel 'dense'"), Error);
  CHECK(attention_kernel_from_string("flash") == AttentionKernel::MemoryEfficient);
  for (AttentionKernel k :
       {AttentionKernel::Standard, AttentionKernel::MemoryEfficient, AttentionKernel::Sparse,
        AttentionKernel::Linear, AttentionKernel::Auto})
    CHECK(attention_kernel_from_string(to_string(k)) == k);
}

// The KV cache (generation/kv_cache.h) attends with softmax over every cached
// key: the numbers of the standard and memory-efficient kernels. (Sparse and
// linear attention have steps of their own: tests/decode_kernel_tests.h.)
TEST_CASE(
    "a GPT running the memory-efficient kernel decodes with the KV cache to its full forward") {
  GPTConfig c;
  c.vocab = 13;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 32;
  c.max_positions = 200;
  c.seed = 3;
  GPT m(c);
  m.eval();
  for (auto& l : m.layers) l->self_attn->kernel = AttentionKernel::MemoryEfficient;
  const int64_t B = 2, T = 150;  // more than two query blocks and one key block
  Generator g = test_generator();
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < B * T; ++i) ids.push_back(g.randint(0, c.vocab));
  Tensor full;
  {
    NoGradGuard ng;
    full = m.forward(Tokens{ids, B, T, {}}).data();  // (B, T, V)
  }
  KVCache cache = start_generation(m, B, T);
  double diff = 0, scale = 0;
  for (int64_t t = 0; t < T; ++t) {
    Tensor logits = forward_step(m, cache, {ids[t], ids[T + t]}, 1);  // (B, 1, V)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t v = 0; v < c.vocab; ++v) {
        const double want = full.data()[(b * T + t) * c.vocab + v];
        diff = std::max(diff, std::abs(logits.data()[b * c.vocab + v] - want));
        scale = std::max(scale, std::abs(want));
      }
  }
  INFO("max |cached - full| = " << diff << ", scale " << scale);
  CHECK(diff <= 1e-5 * scale);
}
