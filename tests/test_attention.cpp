// Multi-head attention in float32: PyTorch parity (torch.nn.MultiheadAttention
// with the same weights, per-head probabilities), the packed weight layout the
// fast path relies on, masks and error messages.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "fixture.h"
#include "outer_region.h"
#include "nn/attention.h"
#include "nn/attention_internal.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::check_close;
using qkv::testing::check_param_grads;
using qkv::testing::ids_of;
using qkv::testing::test_generator;

namespace {
// Loss = sum(out * upstream), as the fixture's reference.
// kernel: the heads' kernel under test; the standard one also returns P.
void parity_case(const std::string& c, bool cross,
                 AttentionKernel kernel = AttentionKernel::Standard) {
  TensorFile f = load_fixture("layers.safetensors");
  MultiHeadAttention mha(8, 2);
  load_params(mha, f, c + ".");
  mha.kernel = kernel;
  mha.keep_attention(kernel == AttentionKernel::Standard);
  Var xq(f.get(c + (cross ? ".in.xq" : ".in.x")).clone(), true);
  Var xkv = cross ? Var(f.get(c + ".in.xkv").clone(), true) : xq;
  const std::vector<int64_t> lens = ids_of(f.get(c + ".in.lens"));
  Var y = mha.forward(xq, xkv,
                      cross ? AttentionMask::padding(lens) : AttentionMask::causal_padding(lens));
  check_close(y.data(), f.get(c + ".out.y"), c + " out.y");
  if (kernel == AttentionKernel::Standard)
    check_close(mha.last_attention(), f.get(c + ".out.attn"), c + " out.attn");
  y.backward(f.get(c + ".in.upstream"));
  check_close(xq.grad(), f.get(c + (cross ? ".grad.xq" : ".grad.x")),
              c + " grad of the query input");
  if (cross) check_close(xkv.grad(), f.get(c + ".grad.xkv"), c + " grad.xkv");
  check_param_grads(mha.named_parameters(), f, c + ".grad.", c);
}
}  // namespace

TEST_CASE(
    "causal + padded self-attention matches torch.nn.MultiheadAttention: output, per-head weights, "
    "every gradient") {
  parity_case("mha_self", false);
}

TEST_CASE("padded cross-attention (T != S) matches torch.nn.MultiheadAttention") {
  parity_case("mha_cross", true);
}

TEST_CASE(
    "the memory-efficient kernel matches torch.nn.MultiheadAttention: causal + padded self- and "
    "padded cross-attention") {
  parity_case("mha_self", false, AttentionKernel::MemoryEfficient);
  parity_case("mha_cross", true, AttentionKernel::MemoryEfficient);
}

TEST_CASE(
    "MultiHeadAttention keeps W_Q, W_K, W_V back to back, and the packed path equals the copying "
    "path") {
  Generator g = test_generator();
  MultiHeadAttention mha(8, 2, true, g);
  const real* q = mha.w_q->weight.data().data();
  CHECK(mha.w_k->weight.data().data() == q + 64);
  CHECK(mha.w_v->weight.data().data() == q + 128);
  CHECK(mha.w_k->bias.data().data() == mha.w_q->bias.data().data() + 8);
  // The same weights in separate tensors take the copying path: same numbers.
  std::vector<Var> sep;
  for (auto& [n, p] : mha.named_parameters()) sep.emplace_back(p.data().clone(), true);
  Var x(Tensor::normal({2, 5, 8}, 0, 1, g), true);
  Var m(Tensor::normal({2, 3, 8}, 0, 1, g), true);
  for (bool cross : {false, true}) {
    const Var& kv = cross ? m : x;
    Var a = mha.forward(x, kv, AttentionMask::padding({cross ? 3 : 5, 2}));
    AttentionOptions o;
    o.heads = 2;
    o.mask = AttentionMask::padding({cross ? 3 : 5, 2});
    Var b = multi_head_attention(
                x, kv, {sep[0], sep[1], sep[2], sep[3], sep[4], sep[5], sep[6], sep[7]}, o)
                .out;
    CHECK(max_abs_diff(a.data(), b.data()) == 0);
    Tensor up = Tensor::normal({2, 5, 8}, 0, 1, g);
    a.backward(up);
    b.backward(up);
    auto params = mha.named_parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      INFO(params[i].first);
      CHECK(max_abs_diff(params[i].second.grad(), sep[i].grad()) < 1e-6);
      params[i].second.clear_grad();
      sep[i].clear_grad();
    }
  }
}

TEST_CASE("a query whose keys are all masked gets a zero output row and zero gradient, never NaN") {
  Generator g = test_generator();
  MultiHeadAttention mha(4, 2, true, g);
  Var x(Tensor::normal({2, 3, 4}, 0, 1, g), true);
  // Sequence 1 has no valid keys at all.
  Var y = mha.forward(x, x, AttentionMask::padding({3, 0}));
  mha.keep_attention(true);
  Var y2 = mha.forward(x, x, AttentionMask::padding({3, 0}));
  const Tensor& P = mha.last_attention();  // (B,H,T,S)
  for (int64_t i = 0; i < P.numel(); ++i) CHECK(std::isfinite(P.data()[i]));
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t s = 0; s < 3; ++s) CHECK(P.at({1, h, t, s}) == 0);
  // With all keys hidden, the attention output is just the output bias.
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t d = 0; d < 4; ++d)
      CHECK(y2.data().at({1, t, d}) == doctest::Approx(mha.w_o->bias.data().at({d})));
  sum(y2).backward();
  for (int64_t i = 0; i < x.grad().numel(); ++i) CHECK(std::isfinite(x.grad().data()[i]));
  (void)y;
}

TEST_CASE("attention errors name the op and the shapes") {
  MultiHeadAttention mha(8, 2);
  Var x(Tensor::zeros({2, 3, 8}));
  CHECK_THROWS_WITH_AS(MultiHeadAttention(10, 3),
                       doctest::Contains("d_model 10 is not divisible by 3 heads"), Error);
  CHECK_THROWS_WITH_AS(mha.forward(x, Var(Tensor::zeros({3, 4, 8}))),
                       doctest::Contains("query (2,3,8) and key/value (3,4,8)"), Error);
  CHECK_THROWS_WITH_AS(mha.forward(Var(Tensor::zeros({2, 3, 6})), Var(Tensor::zeros({2, 3, 6}))),
                       doctest::Contains("attention: weight (8,8) should be (6,6)"), Error);
  CHECK_THROWS_WITH_AS(mha.forward(x, x, AttentionMask::padding({3})),
                       doctest::Contains("1 key lengths for a batch of 2"), Error);
  CHECK_THROWS_WITH_AS(mha.forward(x, x, AttentionMask::padding({3, 4})),
                       doctest::Contains("key length 4 of sequence 1 is outside [0, 3]"), Error);
  AttentionMask bad;
  bad.mask = Tensor::zeros({3, 4});
  CHECK_THROWS_WITH_AS(mha.forward(x, x, bad),
                       doctest::Contains("mask of shape (3,4) does not match (T,S) = (3,3)"),
                       Error);
}

TEST_CASE("a boolean mask hides exactly the marked scores") {
  Generator g = test_generator();
  MultiHeadAttention mha(4, 1, true, g);
  mha.keep_attention(true);
  Var x(Tensor::normal({1, 3, 4}, 0, 1, g));
  AttentionMask m;
  m.mask = Tensor::zeros({3, 3});
  m.mask.at({0, 2}) = 1;
  m.mask.at({2, 0}) = 1;
  mha.forward(x, x, m);
  const Tensor& P = mha.last_attention();
  CHECK(P.at({0, 0, 0, 2}) == 0);
  CHECK(P.at({0, 0, 2, 0}) == 0);
  CHECK(P.at({0, 0, 1, 0}) > 0);
  for (int64_t i = 0; i < 3; ++i) {
    real rs = 0;
    for (int64_t j = 0; j < 3; ++j) rs += P.at({0, 0, i, j});
    CHECK(rs == doctest::Approx(1));
  }
}

// backward twice through a retained graph adds the same gradients twice, on
// both the path that keeps the head outputs O and the one that recomputes
// them: nothing saved is overwritten by the first backward.
TEST_CASE(
    "attention backward twice with retain_graph gives exactly twice the gradients, O kept or "
    "recomputed") {
  using nn::detail::HeadOutputs;
  struct Case {
    int64_t D, H, S;
    HeadOutputs saved;
  };
  for (const Case c : {Case{8, 2, 4, HeadOutputs::Keep}, Case{8, 2, 3, HeadOutputs::Recompute}}) {
    CAPTURE(c.S);
    Generator g = test_generator();
    MultiHeadAttention mha(c.D, c.H, true, g);
    Var x(Tensor::normal({2, c.S, c.D}, 0, 1, g), true);
    const Tensor up = Tensor::normal({2, c.S, c.D}, 0, 1, g);
    AttentionOptions o;
    o.heads = c.H;
    o.mask = AttentionMask::causal_mask();
    Var y = nn::detail::multi_head_attention(x, x, mha.weights(), o, c.saved).out;
    y.backward(up, /*retain_graph=*/true);
    std::vector<Tensor> once{x.grad().clone()};
    for (auto& [name, p] : mha.named_parameters()) once.push_back(p.grad().clone());
    y.backward(up);
    std::vector<Tensor> twice{x.grad()};
    for (auto& [name, p] : mha.named_parameters()) twice.push_back(p.grad());
    for (size_t i = 0; i < once.size(); ++i) {
      CAPTURE(i);
      Tensor want = once[i].clone();
      want.add_(once[i]);
      CHECK(max_abs_diff(want, twice[i]) == 0);
    }
  }
}

// Auto keeps O when it is no bigger than P or small in bytes, and recomputes
// it only where that saves real memory: the benchmark shapes' layers.
TEST_CASE(
    "attention keeps head outputs for tiny, small and GPT layers and recomputes them for base") {
  using nn::detail::attention_keeps_head_outputs;
  CHECK(attention_keeps_head_outputs(64, 12, 12, 64, 4));         // tiny: D > H*S, but 192 KiB
  CHECK(attention_keeps_head_outputs(64, 32, 32, 128, 4));        // small: D <= H*S
  CHECK(attention_keeps_head_outputs(8, 64, 64, 128, 4));         // GPT
  CHECK_FALSE(attention_keeps_head_outputs(32, 32, 32, 512, 8));  // base: 2 MiB per layer
  CHECK(attention_keeps_head_outputs(2, 512, 512, 512, 1));       // D <= H*S at any size
}

// Called from inside someone else's parallel region, backward runs on the
// calling thread with one (T,S) scratch block, and gives the serial gradients.
// The outer region has more threads (2) than qkv is set to use (1).
TEST_CASE("attention backward inside an outer parallel region gives the serial gradients") {
  const int prev = get_num_threads();
  set_num_threads(1);
  Generator g = test_generator();
  MultiHeadAttention mha(8, 2, true, g);
  const Tensor x0 = Tensor::normal({3, 5, 8}, 0, 1, g), up = Tensor::normal({3, 5, 8}, 0, 1, g);
  auto grad_of_x = [&] {
    Var x(x0.clone(), true);
    AttentionOptions o;
    o.heads = 2;
    o.mask = AttentionMask::causal_mask();
    const AttentionWeights w = mha.weights();
    multi_head_attention(x, x,
                         {w.wq.detach(), w.bq.detach(), w.wk.detach(), w.bk.detach(), w.wv.detach(),
                          w.bv.detach(), w.wo.detach(), w.bo.detach()},
                         o)
        .out.backward(up);
    return x.grad();
  };
  const Tensor serial = grad_of_x();
  for (const Tensor& got : testing::on_each_thread_of_outer_region(grad_of_x))
    if (got.defined()) CHECK(max_abs_diff(got, serial) == 0);
  set_num_threads(prev);
}

// Table 3 row B: the query/key head size d_k set apart from d_v = D / H.
TEST_CASE(
    "MultiHeadAttention with d_k != d_model/heads keeps W_Q, W_K (H*d_k, D) and W_V (D, D) back "
    "to back, equals the copying path, and names the shapes it refuses") {
  Generator g = test_generator();
  MultiHeadAttention mha(8, 2, true, g, /*d_k=*/3);
  CHECK(mha.d_k == 3);
  CHECK(mha.d_v == 4);
  CHECK(mha.w_q->weight.shape() == Shape{6, 8});
  CHECK(mha.w_k->weight.shape() == Shape{6, 8});
  CHECK(mha.w_v->weight.shape() == Shape{8, 8});
  CHECK(mha.w_o->weight.shape() == Shape{8, 8});
  const real* q = mha.w_q->weight.data().data();
  CHECK(mha.w_k->weight.data().data() == q + 48);
  CHECK(mha.w_v->weight.data().data() == q + 96);
  CHECK(mha.w_v->bias.data().data() == mha.w_q->bias.data().data() + 12);
  std::vector<Var> sep;
  for (auto& [n, p] : mha.named_parameters()) sep.emplace_back(p.data().clone(), true);
  Var x(Tensor::normal({2, 5, 8}, 0, 1, g), true);
  Var m(Tensor::normal({2, 3, 8}, 0, 1, g), true);
  AttentionOptions o;
  o.heads = 2;
  o.d_k = 3;
  for (bool cross : {false, true}) {
    const Var& kv = cross ? m : x;
    o.mask = AttentionMask::padding({cross ? 3 : 5, 2});
    Var a = mha.forward(x, kv, o.mask);
    Var b = multi_head_attention(
                x, kv, {sep[0], sep[1], sep[2], sep[3], sep[4], sep[5], sep[6], sep[7]}, o)
                .out;
    CHECK(max_abs_diff(a.data(), b.data()) == 0);
  }
  // The default scale is 1/sqrt(d_k) of this d_k: scale = 1/sqrt(3) given by hand is the same.
  o.scale = real(1) / std::sqrt(real(3));
  Var by_hand = multi_head_attention(x, x, mha.weights(), o).out;
  o.scale = 0;
  CHECK(max_abs_diff(by_hand.data(), multi_head_attention(x, x, mha.weights(), o).out.data()) == 0);
  o.d_k = 4;
  CHECK_THROWS_WITH_AS(multi_head_attention(x, x, mha.weights(), o),
                       "attention: weight (6,8) should be (8,8) (wq: (H*d_k, D) with d_k 4)",
                       Error);
  o.d_k = 0;
  CHECK_THROWS_WITH_AS(multi_head_attention(x, x, mha.weights(), o),
                       "attention: weight (6,8) should be (8,8) (wq: (H*d_k, D) with d_k 4)",
                       Error);
  CHECK_THROWS_WITH_AS(MultiHeadAttention(8, 2, true, g, -1),
                       "MultiHeadAttention: d_k -1 is negative (0: d_model / heads)", Error);
}
