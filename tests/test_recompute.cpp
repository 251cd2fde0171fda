// Activation recomputation (autograd/recompute.h): gradients with and
// without it are bit-identical, dropout included; the random stream after a
// step is the same; a function whose re-run differs, or that no gradient
// could reach, is refused.
#include <doctest/doctest.h>

#include "autograd/qkv_autograd.h"
#include "models/encoder_decoder.h"
#include "models/gpt.h"
#include "nn/cross_entropy.h"
#include "nn/dropout.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::test_generator;

namespace {

// Every parameter's gradient of one training step of a GPT with dropout 0.1,
// each layer recomputing `r` and running attention `kernel`.
// With `llama`: the llama block (RMSNorm, SwiGLU, no biases).
std::vector<Tensor> gpt_grads(Recompute r, AttentionKernel kernel, uint64_t* rng_after,
                              bool llama = false) {
  GPTConfig c;
  if (llama) {
    c.norm = "rms";
    c.activation = Activation::SwiGLU;
    c.bias = false;
  }
  c.vocab = 11;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 3;
  c.d_ff = 32;
  c.max_positions = 12;
  c.dropout = 0.1;
  c.seed = 5;
  GPT m(c);
  m.train();
  for (auto& l : m.layers) {
    l->recompute = r;
    l->self_attn->kernel = kernel;
  }
  Generator g = test_generator();
  Tokens ids{{}, 2, 12, {}};
  for (int64_t i = 0; i < 24; ++i) ids.ids.push_back(g.randint(0, 11));
  std::vector<int64_t> targets;
  for (int64_t i = 0; i < 24; ++i) targets.push_back(g.randint(0, 11));
  Var loss = cross_entropy(m.forward(ids), targets);
  loss.backward();
  std::vector<Tensor> out;
  for (auto& [name, p] : m.named_parameters()) out.push_back(p.grad().clone());
  *rng_after = m.dropout_gen.next_u64();
  return out;
}

void check_identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    REQUIRE(a[i].defined());
    CHECK(max_abs_diff(a[i], b[i]) == 0);
  }
}

}  // namespace

TEST_CASE(
    "a GPT's gradients with layers or FFNs recomputed are bit-identical to those without, dropout "
    "on") {
  for (AttentionKernel k : {AttentionKernel::Standard, AttentionKernel::MemoryEfficient}) {
    CAPTURE(to_string(k));
    uint64_t rng_none = 0, rng_ffn = 0, rng_layer = 0;
    const std::vector<Tensor> none = gpt_grads(Recompute::None, k, &rng_none);
    check_identical(gpt_grads(Recompute::FFN, k, &rng_ffn), none);
    check_identical(gpt_grads(Recompute::Layer, k, &rng_layer), none);
    // the dropout stream continues where it would have without recompute
    CHECK(rng_ffn == rng_none);
    CHECK(rng_layer == rng_none);
  }
}

TEST_CASE(
    "a llama-block GPT (RMSNorm, SwiGLU, no biases): SwiGLU or whole layers recomputed give "
    "bit-identical gradients") {
  uint64_t rng_none = 0, rng_ffn = 0, rng_layer = 0;
  const auto k = AttentionKernel::Standard;
  const std::vector<Tensor> none = gpt_grads(Recompute::None, k, &rng_none, true);
  REQUIRE(none.size() == 3 * (4 + 2 + 3) + 3);  // no biases: W_QKVO, 2 gains, SwiGLU's 3; + 3
  check_identical(gpt_grads(Recompute::FFN, k, &rng_ffn, true), none);
  check_identical(gpt_grads(Recompute::Layer, k, &rng_layer, true), none);
  CHECK(rng_ffn == rng_none);
  CHECK(rng_layer == rng_none);
}

TEST_CASE(
    "an encoder-decoder's decoder layers recomputed give bit-identical gradients, memory's "
    "included") {
  auto grads = [](Recompute r) {
    LayerOptions o;  // D 16, H 2, d_ff 32, dropout 0.1, Pre-LN
    o.d_model = 16;
    o.heads = 2;
    o.d_ff = 32;
    o.dropout = 0.1;
    o.activation = Activation::ReLU;
    o.pre_norm = true;
    o.attn.recompute = r;
    Generator init(3), drop(4), data(7);
    DecoderLayer layer(o, init, drop);
    layer.train();
    Var y(Tensor::normal({2, 5, 16}, 0, 1, data), true);
    Var mem(Tensor::normal({2, 4, 16}, 0, 1, data), true);
    Var out = layer.forward(y, mem, AttentionMask::causal_padding({5, 3}),
                            AttentionMask::padding({4, 2}));
    out.backward(Tensor::normal({2, 5, 16}, 0, 1, data));
    std::vector<Tensor> g{y.grad(), mem.grad()};
    for (auto& [n, p] : layer.named_parameters()) g.push_back(p.grad());
    return g;
  };
  const std::vector<Tensor> none = grads(Recompute::None);
  check_identical(grads(Recompute::Layer), none);
  check_identical(grads(Recompute::FFN), none);
}

TEST_CASE("recompute keeps one node in the graph instead of the function's") {
  Generator g = test_generator();
  Var x(Tensor::normal({3, 4}, 0, 1, g), true);
  Var w(Tensor::normal({4, 4}, 0, 1, g), true);
  auto f = [&](const std::vector<Var>& in) { return tanh(matmul(relu(in[0]), w)) * 2.0; };
  Var y = recompute(f, {x});
  REQUIRE(static_cast<bool>(y.grad_fn()));
  CHECK(std::string(y.grad_fn()->name()) == "recompute");
  CHECK(y.grad_fn()->inputs.size() == 1);
  CHECK(max_abs_diff(y.data(), f({x}).data()) == 0);
  // and without grad recording it is f itself
  NoGradGuard off;
  CHECK_FALSE(recompute(f, {x}).requires_grad());
}

TEST_CASE(
    "recompute refuses a function whose re-run differs (an unlisted generator) and one no "
    "gradient reaches") {
  Generator g = test_generator();
  Var x(Tensor::normal({4, 6}, 0, 1, g), true);
  Generator unlisted(11);
  Var y = recompute([&](const std::vector<Var>& in) { return dropout(in[0], 0.5, unlisted); }, {x});
  CHECK_THROWS_WITH_AS(sum(y).backward(), doctest::Contains("recompute: re-running the function"),
                       Error);
  // listed, the same function's gradient is dropout's own
  Generator listed(11), copy(11);
  Var y2 = recompute([&](const std::vector<Var>& in) { return dropout(in[0], 0.5, listed); }, {x},
                     {&listed});
  sum(y2).backward();
  Var x3(x.data().clone(), true);
  sum(dropout(x3, 0.5, copy)).backward();
  CHECK(max_abs_diff(x.grad(), x3.grad()) == 0);
  Var c(Tensor::normal({4, 6}, 0, 1, g), false);
  CHECK_THROWS_WITH_AS(recompute([&](const std::vector<Var>& in) { return in[0] * 2.0; }, {c}),
                       doctest::Contains("recompute: none of the 1 inputs requires grad"), Error);
}
