// The key/value cache with sparse and linear self-attention: cached decoding
// must equal the full recompute with the model's own kernel (sparse:
// softmax over the keys SparsePattern::visible lets a query see; linear: the
// running sums S and z instead of keys), at every position of sequences long
// enough to cross the window several times (the GPT's 70 positions also cross
// the full kernels' 64-row query blocks and chunks once); and the decoders
// (greedy, beam search, sampling; nn::answer in tests/test_model_interface.cpp)
// must give with the cache the tokens they give without it. Compiled into
// both test binaries beside tests/decode_tests.h (float32, and float64 where
// the logits agree to ~1e-12).
#pragma once
#include "decode_tests.h"

namespace qkv::decode_tests {

// A sparse or linear GPT of gpt_config's sizes with room for `positions`.
inline GPTConfig kernel_gpt_config(bool pre_norm, AttentionKernel k, int64_t window,
                                   int64_t global_every, int64_t positions) {
  GPTConfig c = gpt_config(pre_norm);
  c.attention = k;
  c.window = window;
  c.global_every = global_every;
  c.max_positions = positions;
  return c;
}

inline TransformerConfig kernel_seq2seq_config(bool pre_norm, AttentionKernel k, int64_t window,
                                               int64_t global_every) {
  TransformerConfig c = seq2seq_config(pre_norm, false, false);  // sinusoidal: any length
  c.attention = k;
  c.window = window;
  c.global_every = global_every;
  return c;
}

// ---- sparse ---------------------------------------------------------------------------------

TEST_CASE(
    "forward_step equals GPT::forward with sparse attention at all 70 positions: windows 1 to 8, "
    "no globals and globals every 1, 4, 5, 16, d_k apart from D/H, prefill then single steps") {
  // (window, global_every): a window of one (each query sees itself and the
  // globals only), windows crossed many times with no global position, global
  // positions inside and outside the window, every position global (dense).
  const std::vector<std::pair<int64_t, int64_t>> patterns = {{1, 0}, {3, 0}, {3, 4},
                                                             {8, 5}, {2, 1}, {5, 16}};
  const int64_t B = 2, T = 70;
  for (bool pre_norm : {true, false})
    for (auto [w, g] : patterns) {
      GPTConfig c = kernel_gpt_config(pre_norm, AttentionKernel::Sparse, w, g, T);
      if (w == 3 && g == 4) c.d_k = 5;  // keys of 5 per head, values of D/H = 4: widths apart
      GPT m(c);
      m.eval();
      const std::vector<int64_t> ids = random_ids(B * T, m.cfg.vocab, test_seed(w * 100 + g));
      Tensor full;
      {
        NoGradGuard ng;
        full = m.forward(Tokens{ids, B, T, {}}).data();  // (B, T, V), the full sparse kernel
      }
      for (int64_t prefill : {1, 13}) {
        CAPTURE(pre_norm);
        CAPTURE(w);
        CAPTURE(g);
        CAPTURE(prefill);
        check_gpt_steps(m, ids, B, T, prefill, full);
      }
    }
}

TEST_CASE(
    "decode_step equals Seq2SeqTransformer::decode with sparse decoder self-attention over 40 "
    "positions, padded sources, prefill then single steps") {
  const Tokens src = padded_src();
  const int64_t T = 40;
  for (auto [w, g] : std::vector<std::pair<int64_t, int64_t>>{{2, 0}, {3, 4}, {6, 7}})
    for (bool pre_norm : {false, true}) {
      Seq2SeqTransformer m(kernel_seq2seq_config(pre_norm, AttentionKernel::Sparse, w, g));
      m.eval();
      const std::vector<int64_t> tgt = random_ids(src.batch * T, m.cfg.tgt_vocab, test_seed(w));
      Tensor full;
      {
        NoGradGuard ng;
        full = m.decode(Tokens{tgt, src.batch, T, {}}, m.encode(src), src).data();  // (B, T, V)
      }
      for (int64_t prefill : {1, 9}) {
        CAPTURE(w);
        CAPTURE(g);
        CAPTURE(pre_norm);
        CAPTURE(prefill);
        check_seq2seq_steps(m, src, tgt, T, prefill, full);
      }
    }
}

// ---- linear ---------------------------------------------------------------------------------

TEST_CASE(
    "forward_step equals GPT::forward with linear attention at all 70 positions, from running "
    "sums S (H, d_k, d_v) and z (H, d_k) per row that never grow, d_k = d_v and d_k != d_v") {
  const int64_t B = 3, T = 70;
  for (int64_t d_k : {0, 5})  // d_model 16, 2 heads: d_v 8
    for (bool pre_norm : {true, false}) {
      GPTConfig c = kernel_gpt_config(pre_norm, AttentionKernel::Linear, 0, 0, T);
      c.d_k = d_k;
      GPT m(c);
      m.eval();
      const int64_t dk = d_k ? d_k : 8;
      const std::vector<int64_t> ids = random_ids(B * T, m.cfg.vocab, test_seed(d_k));
      Tensor full;
      {
        NoGradGuard ng;
        full = m.forward(Tokens{ids, B, T, {}}).data();  // (B, T, V), the chunked full kernel
      }
      for (int64_t prefill : {1, 20}) {
        CAPTURE(d_k);
        CAPTURE(pre_norm);
        CAPTURE(prefill);
        check_gpt_steps(m, ids, B, T, prefill, full);
      }
      // What the cache holds: no keys, the sums alone, whatever the capacity.
      KVCache cache = start_generation(m, B, T);
      for (size_t l = 0; l < m.layers.size(); ++l) {
        CHECK_FALSE(cache.self_kv[l].defined());
        CHECK(cache.linear_kv[l].shape() == Shape{B, 2, dk, 8});
        CHECK(cache.linear_z[l].shape() == Shape{B, 2, dk});
      }
    }
}

TEST_CASE(
    "decode_step equals Seq2SeqTransformer::decode with linear decoder self-attention over 40 "
    "positions, padded sources, prefill then single steps") {
  const Tokens src = padded_src();
  const int64_t T = 40;
  for (bool pre_norm : {false, true}) {
    Seq2SeqTransformer m(kernel_seq2seq_config(pre_norm, AttentionKernel::Linear, 0, 0));
    m.eval();
    const std::vector<int64_t> tgt = random_ids(src.batch * T, m.cfg.tgt_vocab, test_seed());
    Tensor full;
    {
      NoGradGuard ng;
      full = m.decode(Tokens{tgt, src.batch, T, {}}, m.encode(src), src).data();  // (B, T, V)
    }
    for (int64_t prefill : {1, 9}) {
      CAPTURE(pre_norm);
      CAPTURE(prefill);
      check_seq2seq_steps(m, src, tgt, T, prefill, full);
    }
  }
}

// ---- reorder ------------------------------------------------------------------------------

TEST_CASE(
    "KVCache::reorder moves linear running sums and sparse keys: continuing reordered rows equals "
    "decoding the reordered prefixes") {
  const Tokens src = padded_src();
  const int64_t B = src.batch, T = 12;
  for (AttentionKernel k : {AttentionKernel::Linear, AttentionKernel::Sparse}) {
    CAPTURE(to_string(k));
    Seq2SeqTransformer m(kernel_seq2seq_config(true, k, 2, 5));
    m.eval();
    const int64_t V = m.cfg.tgt_vocab;
    const std::vector<int64_t> tgt = random_ids(B * T, V, test_seed());
    KVCache cache = start_decoding(m, src, T, /*rows_per_source=*/2);  // rows 2b, 2b+1: source b
    // Row 2b decodes tgt row b, row 2b+1 tgt row b+1 (mod B): the two rows of
    // a source hold different prefixes, so a reorder that swaps them fails.
    std::vector<int64_t> tgt2(tgt.size());  // tgt's rows rotated: row b is tgt row b+1
    for (int64_t b = 0; b < B; ++b)
      std::copy(tgt.begin() + ((b + 1) % B) * T, tgt.begin() + ((b + 1) % B + 1) * T,
                tgt2.begin() + b * T);
    auto target = [&](int64_t old_row, int64_t t) {  // the id old row `old_row` reads at t
      return (old_row % 2 ? tgt2 : tgt)[(old_row / 2) * T + t];
    };
    for (int64_t t = 0; t < 7; ++t) {
      std::vector<int64_t> ids;
      for (int64_t r = 0; r < 2 * B; ++r) ids.push_back(target(r, t));
      decode_step(m, cache, ids);
    }
    // New rows: old rows 5, 0, 0, 3 (sources 2, 0, 0, 1), then five more steps.
    const std::vector<int64_t> from = {5, 0, 0, 3};
    cache.reorder(from);
    REQUIRE(cache.rows() == 4);
    if (k == AttentionKernel::Linear) CHECK(cache.linear_kv[0].size(0) == 4);
    Tensor full, full2;  // (B, T, V) each: source b with tgt row b, and with tgt2 row b
    {
      NoGradGuard ng;
      const Var memory = m.encode(src);
      full = m.decode(Tokens{tgt, B, T, {}}, memory, src).data();
      full2 = m.decode(Tokens{tgt2, B, T, {}}, memory, src).data();
    }
    for (int64_t t = 7; t < T; ++t) {
      std::vector<int64_t> ids;
      for (int64_t f : from) ids.push_back(target(f, t));
      Tensor logits = decode_step(m, cache, ids);  // (4, 1, V)
      for (int64_t r = 0; r < 4; ++r) {
        const Tensor& want = from[r] % 2 ? full2 : full;
        check_logits(logits.data() + r * V, want.data() + ((from[r] / 2) * T + t) * V, V,
                     "reordered row " + std::to_string(r) + " position " + std::to_string(t));
      }
    }
  }
}

// ---- the decoders -----------------------------------------------------------------------

TEST_CASE(
    "greedy_decode and beam_search with the cache give the tokens and log-probabilities they give "
    "without it, for sparse and linear encoder-decoders") {
  const Tokens src = padded_src();
  for (AttentionKernel k : {AttentionKernel::Sparse, AttentionKernel::Linear}) {
    CAPTURE(to_string(k));
    Seq2SeqTransformer m(kernel_seq2seq_config(false, k, 3, 4));
    m.eval();
    DecodeOptions d;
    d.max_new_tokens = 14;
    d.ignore_eos = true;  // every row runs all 14 steps, past two windows
    const auto greedy_cached = greedy_decode(m, src, d);
    d.use_cache = false;
    CHECK(greedy_decode(m, src, d) == greedy_cached);
    // Beam 3 with an <eos> the untrained model emits (its greedy 3rd token of
    // source 0), so hypotheses finish and rows reorder; and fixed-length.
    for (bool ignore_eos : {false, true}) {
      BeamOptions b;
      b.beam = 3;
      b.max_new_tokens = 10;
      b.eos = greedy_cached[0][2];
      b.ignore_eos = ignore_eos;
      const auto cached = beam_search(m, src, b);
      b.use_cache = false;
      const auto recomputed = beam_search(m, src, b);
      REQUIRE(cached.size() == recomputed.size());
      for (size_t s = 0; s < cached.size(); ++s) {
        CAPTURE(ignore_eos);
        CAPTURE(s);
        CHECK(cached[s].tokens == recomputed[s].tokens);
        CHECK(cached[s].finished == recomputed[s].finished);
        CHECK(cached[s].log_prob == doctest::Approx(recomputed[s].log_prob).epsilon(kTol * 10));
      }
    }
  }
}

TEST_CASE(
    "generate with the cache samples the tokens it samples without it for the same seed, sparse "
    "and linear GPTs, prompts of different lengths") {
  const Tokens prompts = gpt_prompts();  // lengths {4, 2, 3}
  for (AttentionKernel k : {AttentionKernel::Sparse, AttentionKernel::Linear}) {
    CAPTURE(to_string(k));
    GPT m(kernel_gpt_config(true, k, 3, 5, 40));
    m.eval();
    SampleOptions o;
    o.max_new_tokens = 30;
    o.temperature = 1.2;
    o.top_k = 10;
    Generator g1 = test_generator(), g2 = test_generator();
    const auto cached = generate(m, prompts, o, g1);
    o.use_cache = false;
    const auto recomputed = generate(m, prompts, o, g2);
    CHECK(cached == recomputed);
    for (auto& row : cached) CHECK(row.size() == 30);
    // Greedy, each token a largest logit of the whole-sequence forward.
    o.temperature = 0;
    o.use_cache = true;
    Generator unused(0);
    const auto greedy = generate(m, prompts, o, unused);
    for (int64_t b = 0; b < prompts.batch; ++b) {
      CAPTURE(b);
      check_greedy_choices(m, prompt_row(prompts, b), greedy[b], 0);
    }
  }
}

// ---- what the cache refuses -------------------------------------------------------------

TEST_CASE(
    "the cache refuses a sparse pattern the full kernel refuses, a kernel changed after the cache "
    "was made, and sparse or linear cross-attention") {
  GPT m(kernel_gpt_config(true, AttentionKernel::Sparse, 3, 4, 24));
  m.layers[1]->self_attn->sparse.window = 0;
  CHECK(has(error_of([&] { start_generation(m, 1, 4); }),
            "start_generation: layer 1's sparse attention needs window >= 1 and global_every >= "
            "0, got window 0, global_every 4"));
  m.layers[1]->self_attn->sparse.window = 3;
  KVCache cache = start_generation(m, 1, 4);
  m.layers[1]->self_attn->sparse.window = -2;  // changed after the start: refused at the step
  CHECK(has(error_of([&] { forward_step(m, cache, {3}); }),
            "forward_step: layer 1's sparse attention needs window >= 1 and global_every >= 0, "
            "got window -2, global_every 4"));
  m.layers[1]->self_attn->sparse.window = 3;
  m.layers[0]->self_attn->kernel = AttentionKernel::Linear;
  CHECK(has(error_of([&] { forward_step(m, cache, {3}); }),
            "forward_step: layer 0 runs the linear kernel, but the cache was made for a softmax "
            "kernel"));
  Seq2SeqTransformer s(kernel_seq2seq_config(false, AttentionKernel::Linear, 0, 0));
  s.decoder->layers[1]->cross_attn->kernel = AttentionKernel::Sparse;  // not what the models do
  CHECK(has(error_of([&] { start_decoding(s, padded_src(), 4); }),
            "start_decoding: decoder layer 1's cross-attention runs the sparse kernel"));
}

}  // namespace qkv::decode_tests
