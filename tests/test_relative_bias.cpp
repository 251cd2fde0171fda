// T5's relative position buckets against a table worked out by hand from
// the formula (nn/relative_bias.h), and the bias's errors: bad tables,
// buckets and distances, and the kernels that refuse it, each one line
// before any work.
#include <doctest/doctest.h>

#include "autograd/qkv_autograd.h"
#include "errors.h"
#include "models/encoder_decoder.h"
#include "models/gpt.h"
#include "nn/attention.h"
#include "nn/relative_bias.h"
#include "test_seed.h"

using namespace qkv;
using nn::relative_position_bucket;

// T5's defaults: 32 buckets, max distance 128.
// Bidirectional: 16 per direction (rel > 0 adds 16), 8 exact (n = |rel| <
// 8), then 8 + floor(log(n/8) / log(128/8) * 8) = 8 + floor(2 log2(n/8)):
//   n 8..11 -> 8 (2 log2(11/8) = 0.92), 12 -> 9 (1.17), 16 -> 10 (2),
//   23 -> 11 (3.05), 32 -> 12 (4), 64 -> 14 (6), 127 -> 15 (7.98),
//   128 -> 16 clamped to 15.
TEST_CASE("relative buckets: bidirectional, 32 buckets, max distance 128, by hand") {
  const struct {
    int64_t rel, bucket;
  } table[] = {{0, 0},      {-1, 1},   {-7, 7},   {-8, 8},   {-11, 8},   {-12, 9},
               {-16, 10},   {-23, 11}, {-32, 12}, {-64, 14}, {-127, 15}, {-128, 15},
               {-1000, 15}, {1, 17},   {7, 23},   {8, 24},   {16, 26},   {1000, 31}};
  for (const auto& e : table) {
    CAPTURE(e.rel);
    CHECK(relative_position_bucket(e.rel, true, 32, 128) == e.bucket);
  }
}

// Causal: all 32 for n = max(-rel, 0), 16 exact, then 16 + floor(log(n/16) /
// log(128/16) * 16) = 16 + floor(16/3 log2(n/16)):
//   16 -> 16, 31 -> 21 (5.09), 32 -> 21 (5.33), 64 -> 26 (10.67),
//   127 -> 31 (15.94), 128 -> 32 clamped to 31; a later key (rel > 0) -> 0.
TEST_CASE("relative buckets: causal, 32 buckets, max distance 128, by hand") {
  const struct {
    int64_t rel, bucket;
  } table[] = {{5, 0},    {0, 0},    {-1, 1},    {-15, 15},  {-16, 16},  {-31, 21},
               {-32, 21}, {-64, 26}, {-127, 31}, {-128, 31}, {-5000, 31}};
  for (const auto& e : table) {
    CAPTURE(e.rel);
    CHECK(relative_position_bucket(e.rel, false, 32, 128) == e.bucket);
  }
}

// Small settings, as the gradient checks use: 8 buckets, max distance 6.
// Bidirectional: 4 per direction, 2 exact, then 2 + floor(log(n/2)/log(3) * 2):
//   n 2 -> 2, 3 -> 2 (0.74), 4 -> 3 (1.26), 6 -> 4 clamped to 3.
TEST_CASE("relative buckets: 8 buckets, max distance 6, both kinds, by hand") {
  CHECK(relative_position_bucket(-1, true, 8, 6) == 1);
  CHECK(relative_position_bucket(-3, true, 8, 6) == 2);
  CHECK(relative_position_bucket(-4, true, 8, 6) == 3);
  CHECK(relative_position_bucket(-6, true, 8, 6) == 3);
  CHECK(relative_position_bucket(3, true, 8, 6) == 6);
  CHECK(relative_position_bucket(4, true, 8, 6) == 7);
  // causal: 4 exact, then 4 + floor(log(n/4)/log(1.5) * 4): 5 -> 6 (2.2), 6 -> 8 -> 7
  CHECK(relative_position_bucket(-3, false, 8, 6) == 3);
  CHECK(relative_position_bucket(-5, false, 8, 6) == 6);
  CHECK(relative_position_bucket(-6, false, 8, 6) == 7);
}

TEST_CASE("relative bias errors: buckets, distance, table shape, offset and kernels, one line") {
  CHECK_THROWS_WITH_AS(nn::check_relative_bias("x", 6 + 1, 128, true),
                       "x: 7 relative buckets; bidirectional needs an even count >= 4 (half per "
                       "direction)",
                       Error);
  CHECK_THROWS_WITH_AS(nn::check_relative_bias("x", 1, 128, false),
                       "x: 1 relative buckets; causal needs >= 2", Error);
  CHECK_THROWS_WITH_AS(nn::check_relative_bias("x", 32, 8, true),
                       "x: relative max distance 8 must exceed the 8 exact buckets of 32 "
                       "bidirectional buckets",
                       Error);
  CHECK_THROWS_WITH_AS(nn::check_relative_bias("x", 32, 16, false),
                       "x: relative max distance 16 must exceed the 16 exact buckets of 32 causal "
                       "buckets",
                       Error);
  Generator g = testing::test_generator();
  Var x(Tensor::normal({1, 4, 8}, 0, 1, g), true);
  nn::MultiHeadAttention a(8, 2, true, g);
  a.rel_bias = Var(Tensor::zeros({3, 8}), true);
  CHECK_THROWS_WITH_AS(a.forward(x, x),
                       "attention: relative bias table (3,8) should be (H, buckets) with H 2",
                       Error);
  a.rel_bias = Var(Tensor::zeros({2, 8}), true);
  a.rel_max_distance = 6;
  CHECK_NOTHROW(a.forward(x, x));
  for (nn::AttentionKernel k : {nn::AttentionKernel::Sparse, nn::AttentionKernel::Linear}) {
    a.kernel = k;
    a.sparse.window = 2;
    CHECK_THROWS_WITH_AS(a.forward(x, x),
                         (std::string("attention: the ") + nn::to_string(k) +
                          " kernel takes no relative position bias; the standard and "
                          "memory-efficient kernels do")
                             .c_str(),
                         Error);
  }
}

TEST_CASE("relative bias: a zero table is the plain op, bit for bit; a nonzero one changes it") {
  Generator g = testing::test_generator();
  Var x(Tensor::normal({2, 5, 8}, 0, 1, g), true);
  nn::MultiHeadAttention a(8, 2, true, g);
  for (nn::AttentionKernel k :
       {nn::AttentionKernel::Standard, nn::AttentionKernel::MemoryEfficient}) {
    a.kernel = k;
    a.rel_bias = Var();
    const Tensor plain = a.forward(x, x, nn::AttentionMask::causal_mask()).data().clone();
    a.rel_bias = Var(Tensor::zeros({2, 8}), true);
    a.rel_bidirectional = false;
    a.rel_max_distance = 6;
    CHECK(max_abs_diff(a.forward(x, x, nn::AttentionMask::causal_mask()).data(), plain) == 0);
    a.rel_bias = Var(Tensor::normal({2, 8}, 0, 1, g), true);
    CHECK(max_abs_diff(a.forward(x, x, nn::AttentionMask::causal_mask()).data(), plain) > 1e-3);
  }
}

TEST_CASE(
    "relative positions in the models: one table per stack, named and ordered as "
    "docs/checkpoint-format.md lists them, no absolute positions") {
  nn::GPTConfig g;
  g.vocab = 7;
  g.d_model = 8;
  g.heads = 2;
  g.layers = 2;
  g.d_ff = 16;
  g.rel_buckets = 8;
  g.rel_max_distance = 6;
  nn::GPT gpt(g);
  const auto gp = gpt.named_parameters();
  CHECK(gp.front().first == "rel_bias");  // the model's own parameter, before its children
  CHECK(gp.front().second.shape() == Shape{2, 8});
  CHECK(gp[1].first == "tok_embed.weight");  // then no pos_embed.weight
  CHECK(gp[2].first.rfind("layers.0.", 0) == 0);
  nn::TransformerConfig s;
  s.src_vocab = s.tgt_vocab = 7;
  s.d_model = 8;
  s.heads = 2;
  s.encoder_layers = s.decoder_layers = 1;
  s.d_ff = 16;
  s.learned_positions = true;  // with relative positions: no tables all the same
  s.rel_buckets = 8;
  s.rel_max_distance = 6;
  nn::Seq2SeqTransformer m(s);
  std::vector<std::string> names;
  for (const auto& [n, v] : m.named_parameters()) names.push_back(n);
  CHECK(names[0] == "src_embed.weight");
  CHECK(names[1] == "tgt_embed.weight");
  CHECK(names[2] == "encoder.rel_bias");
  CHECK(names[3].rfind("encoder.layers.0.", 0) == 0);
  CHECK(std::find(names.begin(), names.end(), "decoder.rel_bias") != names.end());
  CHECK(std::find(names.begin(), names.end(), "src_pos.weight") == names.end());
  CHECK(!m.decoder->layers[0]->cross_attn->rel_bias.defined());
}
