// The key/value cache with T5's relative position bias: each step adds the
// table entries of its new queries' distances to every cached key (queries
// at positions [t0, t0 + n), keys at [0, t0 + n)), so cached decoding must
// equal the full recompute: GPT (causal table) and the encoder-decoder
// (causal decoder table, bidirectional encoder table, no cross-attention
// bias), standard and memory-efficient kernels, distances past the exact
// buckets. Compiled into both test binaries beside tests/decode_tests.h.
#pragma once
#include "decode_tests.h"

namespace qkv::decode_tests {

TEST_CASE(
    "forward_step equals GPT::forward with relative positions (8 buckets, max distance 6), "
    "standard and memory-efficient, prefill then steps") {
  const int64_t B = 2, T = 9;
  for (AttentionKernel k : {AttentionKernel::Standard, AttentionKernel::MemoryEfficient}) {
    GPTConfig c = gpt_config(true);
    c.rel_buckets = 8;
    c.rel_max_distance = 6;
    c.attention = k;
    GPT m(c);
    m.eval();
    REQUIRE(!m.pos_embed);
    REQUIRE(m.rel_bias.shape() == Shape{c.heads, 8});
    Generator g(test_seed(7));  // a table far from zero: every bucket counts
    m.rel_bias.data().copy_(Tensor::normal({c.heads, 8}, 0, 1, g));
    const std::vector<int64_t> ids = random_ids(B * T, m.cfg.vocab, test_seed(3));
    Tensor full;
    {
      NoGradGuard ng;
      full = m.forward(Tokens{ids, B, T, {T, T}}).data();  // (B, T, V)
    }
    for (int64_t prefill : {1, 4}) {
      CAPTURE(to_string(k));
      CAPTURE(prefill);
      check_gpt_steps(m, ids, B, T, prefill, full);
    }
  }
}

TEST_CASE(
    "decode_step equals Seq2SeqTransformer::decode with relative positions: causal decoder "
    "table, bidirectional encoder table, no absolute positions") {
  for (bool pre_norm : {false, true}) {
    TransformerConfig c = seq2seq_config(pre_norm, pre_norm, false);
    c.rel_buckets = 8;
    c.rel_max_distance = 6;
    Seq2SeqTransformer m(c);
    m.eval();
    REQUIRE((!m.sin_pos && !m.tgt_pos));
    REQUIRE(!m.decoder->layers[0]->cross_attn->rel_bias.defined());
    REQUIRE(m.decoder->layers[1]->self_attn->rel_bias.same_as(m.decoder->rel_bias));
    CHECK(m.encoder->layers[0]->self_attn->rel_bidirectional);
    CHECK(!m.decoder->layers[0]->self_attn->rel_bidirectional);
    Generator g(test_seed(7));
    m.decoder->rel_bias.data().copy_(Tensor::normal({c.heads, 8}, 0, 1, g));
    const Tokens src = padded_src();
    const int64_t B = src.batch, T = 8, V = m.cfg.tgt_vocab;
    const std::vector<int64_t> tgt = random_ids(B * T, V, test_seed());
    Tensor full;
    {
      NoGradGuard ng;
      full = m.decode(Tokens{tgt, B, T, {}}, m.encode(src), src).data();  // (B, T, V)
    }
    for (int64_t prefill : {1, 3}) {
      CAPTURE(pre_norm);
      CAPTURE(prefill);
      check_seq2seq_steps(m, src, tgt, T, prefill, full);
    }
  }
}

TEST_CASE("start_generation refuses relative positions on a sparse or linear layer") {
  for (AttentionKernel k : {AttentionKernel::Sparse, AttentionKernel::Linear}) {
    GPTConfig c = gpt_config(true);
    c.rel_buckets = 8;
    c.rel_max_distance = 6;
    GPT m(c);
    m.layers[1]->self_attn->kernel = k;
    CHECK_THROWS_WITH_AS(start_generation(m, 1, 8),
                         (std::string("start_generation: layer 1's ") + to_string(k) +
                          " attention takes no relative position bias (rel_buckets set)")
                             .c_str(),
                         Error);
  }
}

}  // namespace qkv::decode_tests
