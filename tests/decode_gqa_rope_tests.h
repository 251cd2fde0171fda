// The key/value cache with grouped-query attention (kv_heads K < heads H:
// the cache holds K key/value heads, K/H of the full cache) and rotary
// positions (keys stored rotated at their absolute positions, each new query
// rotated at its own): cached decoding must equal the full recompute for
// GQA, multi-query (K = 1) and RoPE, together and apart, on the standard and
// memory-efficient kernels (a seq2seq: GQA alone, rotary positions being a
// GPT's). Compiled into both test binaries beside
// tests/decode_tests.h (float32, and float64 where they agree to ~1e-12).
#pragma once
#include "decode_tests.h"

namespace qkv::decode_tests {

TEST_CASE(
    "forward_step equals GPT::forward with grouped-query attention (K = 4, 2, 1 of 4 heads) and "
    "rotary positions, together and apart, standard and memory-efficient, prefill then steps") {
  const int64_t B = 2, T = 9;
  for (AttentionKernel k : {AttentionKernel::Standard, AttentionKernel::MemoryEfficient})
    for (int64_t K : {4, 2, 1})
      for (real rope : {real(0), real(10000)}) {
        GPTConfig c = gpt_config(true);
        c.heads = 4;  // d_model 16: d_k = d_v = 4
        c.kv_heads = K;
        c.rope_base = rope;
        c.attention = k;
        GPT m(c);
        m.eval();
        REQUIRE(m.layers[0]->self_attn->w_k->weight.shape() == Shape{K * 4, 16});
        REQUIRE(m.layers[0]->self_attn->w_v->weight.shape() == Shape{K * 4, 16});
        const std::vector<int64_t> ids = random_ids(B * T, m.cfg.vocab, test_seed(K));
        Tensor full;
        {
          NoGradGuard ng;
          full = m.forward(Tokens{ids, B, T, {T, T}}).data();  // (B, T, V)
        }
        for (int64_t prefill : {1, 4}) {
          CAPTURE(to_string(k));
          CAPTURE(K);
          CAPTURE(rope);
          CAPTURE(prefill);
          const KVCache cache = check_gpt_steps(m, ids, B, T, prefill, full);
          // [K | V] of K key/value heads per position: K * (d_k + d_v) = K/4 of 32
          CHECK(cache.self_kv[0].shape() == Shape{B, T, K * (4 + 4)});
        }
      }
}

TEST_CASE(
    "decode_step equals Seq2SeqTransformer::decode with 2 key/value heads of 4 in decoder "
    "self-attention (cross-attention full heads)") {
  for (bool pre_norm : {false, true}) {
    TransformerConfig c = seq2seq_config(pre_norm, pre_norm, false);
    c.kv_heads = 2;
    Seq2SeqTransformer m(c);
    m.eval();
    REQUIRE(m.decoder->layers[0]->self_attn->w_k->weight.shape() == Shape{2 * 4, 16});
    REQUIRE(m.decoder->layers[0]->cross_attn->w_k->weight.shape() == Shape{16, 16});
    const Tokens src = padded_src();
    const int64_t B = src.batch, T = 6, V = m.cfg.tgt_vocab;
    const std::vector<int64_t> tgt = random_ids(B * T, V, test_seed());
    Tensor full;
    {
      NoGradGuard ng;
      full = m.decode(Tokens{tgt, B, T, {}}, m.encode(src), src).data();  // (B, T, V)
    }
    for (int64_t prefill : {1, 3}) {
      CAPTURE(pre_norm);
      CAPTURE(prefill);
      const KVCache cache = check_seq2seq_steps(m, src, tgt, T, prefill, full);
      CHECK(cache.self_kv[0].shape() == Shape{B, T, 2 * (4 + 4)});
      CHECK(cache.memory_kv[0].shape() == Shape{B, src.len, 16 + 16});
    }
  }
}

TEST_CASE("start_generation refuses grouped-query attention or rope on a sparse or linear layer") {
  for (AttentionKernel k : {AttentionKernel::Sparse, AttentionKernel::Linear}) {
    GPT m(gpt_config(true));
    m.layers[1]->self_attn->kernel = k;
    m.layers[1]->self_attn->rope_base = 10000;
    CHECK(has(error_of([&] { start_generation(m, 1, 4); }),
              std::string("start_generation: layer 1's ") + to_string(k) +
                  " attention takes no rotary positions"));
  }
}

}  // namespace qkv::decode_tests
