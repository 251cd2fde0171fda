// The key/value cache with the query/key head size d_k set apart from
// d_model / heads (Table 3 row B): the cache holds keys of width heads * d_k
// and values of width d_model, and cached decoding must still equal the full
// recompute. Compiled into both test binaries beside tests/decode_tests.h
// (float32, and float64 where the logits agree to ~1e-12).
#pragma once
#include "decode_tests.h"

namespace qkv::decode_tests {

TEST_CASE(
    "decode_step equals Seq2SeqTransformer::decode with d_k != d_model/heads, self- and "
    "cross-attention, with padded sources") {
  for (int64_t d_k : {3, 6}) {  // d_model 16, 4 heads: d_v 4
    for (bool pre_norm : {false, true}) {
      TransformerConfig c = seq2seq_config(pre_norm, pre_norm, false);
      c.d_k = d_k;
      Seq2SeqTransformer m(c);
      m.eval();
      REQUIRE(m.decoder->layers[0]->cross_attn->w_q->weight.shape() == Shape{4 * d_k, 16});
      const Tokens src = padded_src();
      const int64_t B = src.batch, T = 6, V = m.cfg.tgt_vocab;
      const std::vector<int64_t> tgt = random_ids(B * T, V, test_seed(d_k));
      Tensor full;
      {
        NoGradGuard ng;
        full = m.decode(Tokens{tgt, B, T, {}}, m.encode(src), src).data();  // (B, T, V)
      }
      for (int64_t prefill : {1, 3}) {
        CAPTURE(d_k);
        CAPTURE(pre_norm);
        CAPTURE(prefill);
        const KVCache cache = check_seq2seq_steps(m, src, tgt, T, prefill, full);
        // [K | V] per position: heads * d_k + d_model columns
        CHECK(cache.self_kv[0].shape() == Shape{B, T, 4 * d_k + 16});
        CHECK(cache.memory_kv[0].shape() == Shape{B, src.len, 4 * d_k + 16});
      }
    }
  }
}

TEST_CASE("forward_step equals GPT::forward with d_k != d_model/heads, after a reorder too") {
  GPTConfig c = gpt_config(true);
  c.d_k = 5;  // d_model 16, 2 heads: d_v 8
  GPT m(c);
  m.eval();
  const int64_t B = 2, T = 6, V = m.cfg.vocab;
  const std::vector<int64_t> ids = random_ids(B * T, V, test_seed());
  Tensor full;
  {
    NoGradGuard ng;
    full = m.forward(Tokens{ids, B, T, {T, T}}).data();  // (B, T, V)
  }
  KVCache cache = start_generation(m, B, T);
  CHECK(cache.self_kv[0].shape() == Shape{B, T, 2 * 5 + 16});
  for (int64_t t = 0; t < T; ++t) {
    if (t == 3) cache.reorder({0, 1});  // a whole-row copy of the wider cache
    std::vector<int64_t> step_ids = {ids[t], ids[T + t]};
    Tensor logits = forward_step(m, cache, step_ids);  // (B, 1, V)
    for (int64_t b = 0; b < B; ++b)
      check_logits(logits.data() + b * V, full.data() + (b * T + t) * V, V,
                   "row " + std::to_string(b) + " position " + std::to_string(t));
  }
}

}  // namespace qkv::decode_tests
