// Grouped-query attention and rotary positions inside the fused attention op,
// float32: the refusals (one line each naming the op and the values), a GPT
// with both that trains, and the layers passing them to self-attention only.
// The gradients are proven in tests/test_attention_gqa_grad.cpp, the KV cache
// in tests/decode_gqa_rope_tests.h.
#include <doctest/doctest.h>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "errors.h"
#include "models/encoder_decoder.h"
#include "models/gpt.h"
#include "nn/attention.h"
#include "nn/cross_entropy.h"
#include "optim/adam.h"
#include "test_seed.h"

using namespace qkv;
using nn::AttentionKernel;
using nn::AttentionMask;
using qkv::testing::check_error;
using qkv::testing::test_generator;

namespace {

// Self-attention of x (1, 4, 8) with 4 heads and options o, weights for kv_heads K.
void run(nn::AttentionOptions o, int64_t K, int64_t d_k = 2) {
  Generator g = test_generator();
  Var x(Tensor::normal({1, 4, 8}, 0, 1, g));
  auto w = [&](int64_t rows) { return Var(Tensor::normal({rows, 8}, 0, 1, g)); };
  nn::AttentionWeights ws{w(4 * d_k), {}, w(K * d_k), {}, w(K * 2), {}, w(8), {}};
  o.heads = 4;
  o.d_k = d_k;
  nn::multi_head_attention(x, x, ws, o);
}

}  // namespace

TEST_CASE("attention refuses kv_heads that do not divide heads, exceed them or are negative") {
  nn::AttentionOptions o;
  o.kv_heads = 3;
  check_error([&] { run(o, 3); }, {"attention: kv_heads 3 does not divide heads 4"});
  o.kv_heads = 8;
  check_error([&] { run(o, 8); }, {"attention: kv_heads 8 is outside [1, heads 4] (0: heads)"});
  o.kv_heads = -1;
  check_error([&] { run(o, 4); }, {"attention: kv_heads -1 is outside [1, heads 4]"});
  check_error([] { nn::MultiHeadAttention(8, 4, true, default_generator(), 0, 3); },
              {"MultiHeadAttention: kv_heads 3 does not divide heads 4"});
  check_error([] { nn::MultiHeadAttention(8, 4, true, default_generator(), 0, 5); },
              {"MultiHeadAttention: kv_heads 5 is outside [1, heads 4] (0: heads)"});
  check_error([] { nn::MultiHeadAttention(8, 4, true, default_generator(), 0, -2); },
              {"MultiHeadAttention: kv_heads -2 is outside [1, heads 4]"});
  // weights for 4 key/value heads given with kv_heads 2: the shape rule names K
  o.kv_heads = 2;
  check_error([&] { run(o, 4); },
              {"attention: weight (8,8) should be (4,8) (wv: (K*d_v, D)", "K 2"});
}

TEST_CASE("attention refuses rope with an odd d_k, a base <= 1 and cross-attention") {
  nn::AttentionOptions o;
  o.rope_base = 10000;
  check_error([&] { run(o, 4, 3); },
              {"attention: rope needs an even head size d_k, got d_k 3 (rope_base 10000)"});
  o.rope_base = 0.5;
  check_error([&] { run(o, 4); }, {"attention: rope_base 0.5 must be > 1 (0: no rotation)"});
  o.rope_base = 10000;
  o.rope_pos0 = -1;
  check_error([&] { run(o, 4); }, {"attention: rope_pos0 -1 is negative"});
  Generator g = test_generator();
  nn::MultiHeadAttention a(8, 4, true, g);
  a.rope_base = 10000;
  Var x(Tensor::normal({1, 3, 8}, 0, 1, g)), mem(Tensor::normal({1, 5, 8}, 0, 1, g));
  check_error([&] { a.forward(x, mem); },
              {"attention: rope_base 10000 needs self-attention (xq and xkv one tensor); "
               "cross-attention takes no rotation"});
}

TEST_CASE("the sparse and linear kernels refuse grouped-query attention and rope, one line each") {
  for (AttentionKernel k : {AttentionKernel::Sparse, AttentionKernel::Linear}) {
    nn::AttentionOptions o;
    o.kernel = k;
    o.sparse.window = 2;
    o.kv_heads = 2;
    check_error([&] { run(o, 2); }, {"attention: the ", to_string(k),
                                     " kernel takes no grouped-query attention (kv_heads 2 != "
                                     "heads 4); the standard and memory-efficient kernels do"});
    o.kv_heads = 0;
    o.rope_base = 10000;
    check_error([&] { run(o, 4); }, {"attention: the ", to_string(k),
                                     " kernel takes no rotary positions (rope_base 10000); the "
                                     "standard and memory-efficient kernels do"});
  }
}

TEST_CASE(
    "a GPT with rope_base 10000 and 2 key/value heads of 4 trains: the loss falls, every "
    "self-attention is grouped and rotated") {
  nn::GPTConfig c;
  c.vocab = 11;
  c.d_model = 16;
  c.heads = 4;
  c.kv_heads = 2;
  c.rope_base = 10000;
  c.layers = 2;
  c.d_ff = 32;
  c.max_positions = 8;
  c.pre_norm = true;
  c.dropout = 0;
  c.seed = testing::test_seed();
  nn::GPT model(c);
  for (const auto& layer : model.layers) {
    CHECK(layer->self_attn->kv_heads == 2);
    CHECK(layer->self_attn->rope_base == 10000);
    CHECK(layer->self_attn->w_k->weight.shape() == Shape{8, 16});  // (K*d_k, D)
    CHECK(layer->self_attn->w_v->weight.shape() == Shape{8, 16});  // (K*d_v, D)
  }
  // A fixed batch to learn: each sequence counts up modulo the vocabulary.
  std::vector<int64_t> ids, targets;
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t t = 0; t < 8; ++t) {
      ids.push_back((b + t) % 11);
      targets.push_back((b + t + 1) % 11);
    }
  const nn::Tokens batch{ids, 4, 8, {8, 8, 8, 8}};
  optim::Adam opt(model.parameters(), 1e-2);
  real first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    opt.zero_grad();
    Var loss = nn::cross_entropy(model.forward(batch), targets);
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  INFO("loss " << first << " -> " << last);
  CHECK(last < first * real(0.5));
}

TEST_CASE(
    "attention with rotary positions only states the rotation's rule, before and after backward "
    "releases what it saved; without either feature the paper's rule") {
  Generator g = test_generator();
  Var x(Tensor::normal({1, 3, 8}, 0, 1, g), true);
  for (real base : {real(0), real(10000)}) {
    nn::MultiHeadAttention a(8, 2, true, g);
    a.rope_base = base;
    Var y = a.forward(x, x, AttentionMask::causal_mask());
    const std::string before = y.grad_fn()->doc().backward;
    sum(y).backward();
    CHECK(std::string(y.grad_fn()->doc().backward) == before);
    CHECK((before.rfind("dK_g = R^T sum_{h in g}", 0) == 0) == (base != 0));
  }
}
