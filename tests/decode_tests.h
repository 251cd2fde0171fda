// The decoding tests: the key/value cache against the full recompute, greedy
// decoding, beam search and sampling. Every one is an equality or an exact
// property with no gradient, so the file is compiled into both test binaries:
// tests/test_decode.cpp (float32) and tests/test_decode_grad.cpp (float64, where
// the cached logits must equal the recompute to ~1e-12). Include it once per binary.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <type_traits>

#include "core/error.h"
#include "errors.h"
#include "core/reduce.h"
#include "generation/decode.h"
#include "test_seed.h"

namespace qkv::decode_tests {

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_generator;
using qkv::testing::test_seed;

// Cached logits vs the full recompute: |diff| <= kTol * max(1, max |logit|).
// The two paths add the same products in a different order (one row at a time
// vs whole blocks), so they differ by rounding only: float32 ~1e-6 here.
constexpr double kTol = std::is_same<real, float>::value ? 2e-5 : 1e-12;

inline TransformerConfig seq2seq_config(bool pre_norm, bool learned, bool tied) {
  TransformerConfig c;
  c.src_vocab = 13;
  c.tgt_vocab = 11;
  c.d_model = 16;
  c.heads = 4;
  c.encoder_layers = 2;
  c.decoder_layers = 2;
  c.d_ff = 32;
  c.dropout = 0;
  c.pre_norm = pre_norm;
  c.learned_positions = learned;
  c.max_positions = 32;
  c.tie_weights = tied;
  c.seed = test_seed(testing::kDecodeModelStream);
  return c;
}

inline GPTConfig gpt_config(bool pre_norm) {
  GPTConfig c;
  c.vocab = 17;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 32;
  c.max_positions = 24;
  c.pre_norm = pre_norm;
  c.tie_weights = pre_norm;  // both head variants
  c.seed = test_seed(testing::kDecodeModelStream);
  return c;
}

// Source batch with padding: lengths {5, 3, 2} of S = 5.
inline Tokens padded_src() {
  return Tokens{{3, 4, 5, 6, 7, 8, 9, 10, 0, 0, 11, 12, 0, 0, 0}, 3, 5, {5, 3, 2}};
}

inline std::vector<int64_t> random_ids(int64_t n, int64_t V, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = g.randint(0, V);
  return ids;
}

// max |a[i] - b[i]| over n values, and the tolerance for logits like b.
inline void check_logits(const real* got, const real* want, int64_t n, const std::string& what) {
  double diff = 0, scale = 1;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  INFO(what << ": max |cached - full| = " << diff << ", scale " << scale);
  CHECK(diff <= kTol * scale);
}

// Checks that every token of `out`, generated after the GPT prompt `seq`, has
// a largest logit of the whole-sequence recompute at its position (the greedy
// choice), to within `slack` plus the rounding by which cached and recomputed
// logits may differ. Comparing with a greedy reference run instead would
// depend on the model's seed: at a near-tie that rounding picks the token.
inline void check_greedy_choices(GPT& m, std::vector<int64_t> seq, const std::vector<int64_t>& out,
                                 double slack) {
  NoGradGuard ng;
  const int64_t V = m.cfg.vocab;
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t T = static_cast<int64_t>(seq.size());
    Tensor logits = m.forward(Tokens{seq, 1, T, {}}).data();  // (1, T, V)
    const real* row = logits.data() + (T - 1) * V;
    double best = row[0], scale = 1;
    for (int64_t v = 0; v < V; ++v) {
      best = std::max(best, static_cast<double>(row[v]));
      scale = std::max(scale, std::abs(static_cast<double>(row[v])));
    }
    CAPTURE(i);
    CHECK(best - row[out[i]] <= slack + 2 * kTol * scale);
    seq.push_back(out[i]);
  }
}

// Feeds ids (B, T) to `cache` through step(cache, step_ids, n) -> logits
// (B, n, V), `prefill` positions first and then one at a time, and checks
// every position's logits against full (B, T, V). Returns the cache, full.
template <class Step>
KVCache check_steps(KVCache cache, const std::vector<int64_t>& ids, int64_t B, int64_t T, int64_t V,
                    int64_t prefill, const Tensor& full, Step step) {
  for (int64_t t = 0; t < T;) {
    const int64_t n = t == 0 ? prefill : 1;
    std::vector<int64_t> step_ids;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < n; ++i) step_ids.push_back(ids[b * T + t + i]);
    Tensor logits = step(cache, step_ids, n);  // (B, n, V)
    REQUIRE(logits.shape() == Shape{B, n, V});
    for (int64_t b = 0; b < B; ++b)
      check_logits(logits.data() + b * n * V, full.data() + (b * T + t) * V, n * V,
                   "row " + std::to_string(b) + " positions from " + std::to_string(t));
    t += n;
    CHECK(cache.length() == t);
  }
  return cache;
}

// A GPT's forward_step against GPT::forward's full (B, T, V).
inline KVCache check_gpt_steps(GPT& m, const std::vector<int64_t>& ids, int64_t B, int64_t T,
                               int64_t prefill, const Tensor& full) {
  return check_steps(start_generation(m, B, T), ids, B, T, m.cfg.vocab, prefill, full,
                     [&](KVCache& c, const std::vector<int64_t>& x, int64_t n) {
                       return forward_step(m, c, x, n);
                     });
}

// An encoder-decoder's decode_step against Seq2SeqTransformer::decode's full (B, T, V).
inline KVCache check_seq2seq_steps(Seq2SeqTransformer& m, const Tokens& src,
                                   const std::vector<int64_t>& tgt, int64_t T, int64_t prefill,
                                   const Tensor& full) {
  return check_steps(start_decoding(m, src, T), tgt, src.batch, T, m.cfg.tgt_vocab, prefill, full,
                     [&](KVCache& c, const std::vector<int64_t>& x, int64_t n) {
                       return decode_step(m, c, x, n);
                     });
}

// The prompts used by the sampling tests: lengths {4, 2, 3} of L = 4.
inline Tokens gpt_prompts() {
  return Tokens{{5, 1, 7, 3, 2, 9, 0, 0, 4, 4, 12, 0}, 3, 4, {4, 2, 3}};
}

inline std::vector<int64_t> prompt_row(const Tokens& p, int64_t b) {
  return {p.ids.begin() + b * p.len, p.ids.begin() + b * p.len + p.lengths[b]};
}

}  // namespace qkv::decode_tests

// ---- the key/value cache ----------------------------------------------------------------

TEST_CASE("decode_step equals Seq2SeqTransformer::decode at every step, with padded sources") {
  using namespace qkv::decode_tests;
  for (int variant = 0; variant < 3; ++variant) {
    // Post-LN sinusoidal; Pre-LN learned positions with tied weights; Post-LN learned.
    Seq2SeqTransformer m(seq2seq_config(variant == 1, variant >= 1, variant == 1));
    m.eval();
    const Tokens src = padded_src();
    const int64_t B = src.batch, T = 7, V = m.cfg.tgt_vocab;
    const std::vector<int64_t> tgt = random_ids(B * T, V, test_seed(variant));
    Tensor full;
    {
      NoGradGuard ng;
      full = m.decode(Tokens{tgt, B, T, {}}, m.encode(src), src).data();  // (B, T, V)
    }
    // prefill = 1: one token per step; prefill = 3: a block of three, then one at a time.
    for (int64_t prefill : {1, 3}) {
      CAPTURE(variant);
      CAPTURE(prefill);
      KVCache cache = check_seq2seq_steps(m, src, tgt, T, prefill, full);
      CHECK_THROWS_AS(decode_step(m, cache, std::vector<int64_t>(B, 1)), Error);  // past capacity
    }
  }
}

TEST_CASE(
    "KVCache::reorder moves whole rows: continuing reordered rows equals decoding the reordered "
    "prefixes") {
  using namespace qkv::decode_tests;
  Seq2SeqTransformer m(seq2seq_config(true, false, false));
  m.eval();
  const Tokens src = padded_src();
  const int64_t B = src.batch, T = 5, V = m.cfg.tgt_vocab;
  const std::vector<int64_t> tgt = random_ids(B * T, V, test_seed());
  KVCache cache = start_decoding(m, src, T, /*rows_per_source=*/2);  // rows 2b, 2b+1 read source b
  REQUIRE(cache.rows() == 2 * B);
  // Rows 2b and 2b+1 both decode tgt row b for three steps.
  for (int64_t t = 0; t < 3; ++t) {
    std::vector<int64_t> ids;
    for (int64_t r = 0; r < 2 * B; ++r) ids.push_back(tgt[(r / 2) * T + t]);
    decode_step(m, cache, ids);
  }
  // New rows: old rows 5, 0, 0, 3 (sources 2, 0, 0, 1); then two more steps with tgt
  // of those sources must give the full decode of those sources' prefixes.
  const std::vector<int64_t> from = {5, 0, 0, 3}, source = {2, 0, 0, 1};
  cache.reorder(from);
  REQUIRE(cache.rows() == 4);
  CHECK(cache.memory_row == source);
  Tensor full;
  {
    NoGradGuard ng;
    full = m.decode(Tokens{tgt, B, T, {}}, m.encode(src), src).data();  // (B, T, V)
  }
  for (int64_t t = 3; t < T; ++t) {
    std::vector<int64_t> ids;
    for (int64_t s : source) ids.push_back(tgt[s * T + t]);
    Tensor logits = decode_step(m, cache, ids);  // (4, 1, V)
    for (int64_t r = 0; r < 4; ++r)
      check_logits(logits.data() + r * V, full.data() + (source[r] * T + t) * V, V,
                   "reordered row " + std::to_string(r) + " position " + std::to_string(t));
  }
  CHECK(has(error_of([&] { cache.reorder({0, 4}); }), "KVCache::reorder: row 4"));
}

TEST_CASE("forward_step equals GPT::forward at every step, with padded prompts") {
  using namespace qkv::decode_tests;
  for (bool pre_norm : {true, false}) {
    GPT m(gpt_config(pre_norm));
    m.eval();
    const int64_t B = 3, T = 6, V = m.cfg.vocab;
    const std::vector<int64_t> lengths = {6, 4, 5};
    std::vector<int64_t> ids = random_ids(B * T, V, test_seed());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = lengths[b]; t < T; ++t) ids[b * T + t] = 0;  // padding
    Tensor full;
    {
      NoGradGuard ng;
      full = m.forward(Tokens{ids, B, T, lengths}).data();  // (B, T, V)
    }
    for (int64_t prefill : {1, 2}) {
      CAPTURE(pre_norm);
      CAPTURE(prefill);
      KVCache cache = start_generation(m, B, T);
      for (int64_t t = 0; t < T;) {
        const int64_t n = t == 0 ? prefill : 1;
        std::vector<int64_t> step_ids;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < n; ++i) step_ids.push_back(ids[b * T + t + i]);
        Tensor logits = forward_step(m, cache, step_ids, n);  // (B, n, V)
        // Positions inside each prompt (padding is only hidden as a key, and
        // causality hides it from every earlier query anyway).
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < n; ++i)
            if (t + i < lengths[b])
              check_logits(logits.data() + (b * n + i) * V, full.data() + (b * T + t + i) * V, V,
                           "row " + std::to_string(b) + " position " + std::to_string(t + i));
        t += n;
      }
    }
  }
  GPT m(gpt_config(true));
  CHECK(has(error_of([&] { start_generation(m, 2, 25); }), "max_positions 24"));
  KVCache cache = start_generation(m, 2, 4);
  CHECK(has(error_of([&] { forward_step(m, cache, {1, 2, 3}); }), "3 ids for (rows, n) = (2,1)"));
}

// ---- greedy -----------------------------------------------------------------------------

TEST_CASE(
    "greedy_decode with the cache gives the uncached decoder's tokens, also when rows stop early") {
  using namespace qkv::decode_tests;
  for (int variant = 0; variant < 2; ++variant) {
    Seq2SeqTransformer m(seq2seq_config(variant == 1, variant == 1, false));
    m.eval();
    const Tokens src = padded_src();
    DecodeOptions o;
    o.max_new_tokens = 12;
    o.use_cache = false;
    // <eos> := the 4th token row 1 emits (found with ignore_eos, so that no
    // <eos> cuts it short), so row 1 stops early and the cached path drops it
    // from its batch while the other rows go on.
    o.ignore_eos = true;
    const auto first = greedy_decode(m, src, o);
    REQUIRE(first[1].size() >= 4);
    o.eos = first[1][3];
    o.ignore_eos = false;
    const auto want = greedy_decode(m, src, o);
    CHECK(static_cast<int64_t>(want[1].size()) <= 3);
    o.use_cache = true;
    const auto got = greedy_decode(m, src, o);
    CAPTURE(variant);
    CHECK(got == want);
  }
}

TEST_CASE(
    "ignore_eos: greedy (cached and not) and beam 1 all give max_new_tokens tokens, the same "
    "ones") {
  using namespace qkv::decode_tests;
  Seq2SeqTransformer m(seq2seq_config(false, false, false));
  m.eval();
  const Tokens src = padded_src();
  DecodeOptions o;
  o.max_new_tokens = 9;
  o.ignore_eos = true;
  // <eos> := the model's first token for source 0, so that it is certainly
  // emitted (with ignore_eos the output does not depend on which id <eos> is).
  const auto probe = greedy_decode(m, src, o);
  REQUIRE(probe[0].size() == 9);
  o.eos = probe[0][0];
  const auto cached = greedy_decode(m, src, o);
  o.use_cache = false;
  const auto uncached = greedy_decode(m, src, o);
  BeamOptions b;
  b.beam = 1;
  b.max_new_tokens = 9;
  b.eos = o.eos;
  b.ignore_eos = true;
  const auto beam = beam_search(m, src, b);
  bool saw_eos = false;
  for (size_t s = 0; s < cached.size(); ++s) {
    CHECK(cached[s].size() == 9);
    CHECK(cached[s] == uncached[s]);
    CHECK(beam[s].tokens == cached[s]);
    CHECK_FALSE(beam[s].finished);
    saw_eos |= std::count(cached[s].begin(), cached[s].end(), o.eos) > 0;
  }
  CHECK(saw_eos);  // <eos> was emitted and decoding went on past it
}

// ---- beam search ------------------------------------------------------------------------

TEST_CASE("beam_search with beam 1 is greedy decoding, token for token") {
  using namespace qkv::decode_tests;
  for (int variant = 0; variant < 2; ++variant) {
    Seq2SeqTransformer m(seq2seq_config(variant == 1, variant == 1, variant == 1));
    m.eval();
    const Tokens src = padded_src();
    for (int64_t eos : {2, 6}) {
      DecodeOptions g;
      g.max_new_tokens = 10;
      g.eos = eos;
      const auto greedy = greedy_decode(m, src, g);
      for (double alpha : {0.0, 0.6}) {
        BeamOptions b;
        b.beam = 1;
        b.alpha = alpha;
        b.max_new_tokens = 10;
        b.eos = eos;
        const auto beam = beam_search(m, src, b);
        REQUIRE(beam.size() == greedy.size());
        for (size_t s = 0; s < beam.size(); ++s) {
          CAPTURE(variant);
          CAPTURE(eos);
          CAPTURE(alpha);
          CAPTURE(s);
          CHECK(beam[s].tokens == greedy[s]);
          CHECK(beam[s].finished == (static_cast<int64_t>(greedy[s].size()) < g.max_new_tokens));
        }
      }
    }
  }
}

TEST_CASE("beam_search of width 4 reports each hypothesis's true log-probability and score") {
  using namespace qkv::decode_tests;
  // Rescore the returned tokens (and the <eos>, when finished) with a full,
  // teacher-forced decode: the sum must be the reported log_prob. This checks
  // the bookkeeping through every cache reorder.
  for (double alpha : {0.0, 0.6}) {
    // Post-LN, learned positions.
    Seq2SeqTransformer m(seq2seq_config(false, true, false));
    m.eval();
    const Tokens src = padded_src();
    const int64_t V = m.cfg.tgt_vocab;
    BeamOptions b;
    b.alpha = alpha;
    b.max_new_tokens = 8;
    // Two <eos> ids (after <pad>, <bos>): the first with which the search runs
    // several steps, so several cache reorders, and the first with which some
    // hypothesis finishes, so that its <eos> is scored too. Which ids do which
    // depends on the model, and so on its seed (an untrained model mostly
    // either ends every source at once or none); the bookkeeping must hold for any.
    std::optional<int64_t> runs_long, finishes;
    for (b.eos = 2; b.eos < V && !(runs_long && finishes); ++b.eos) {
      size_t longest = 0;
      bool finished = false;
      for (auto& h : beam_search(m, src, b)) {
        longest = std::max(longest, h.tokens.size());
        finished |= h.finished;
      }
      if (!runs_long && longest >= 3) runs_long = b.eos;
      if (!finishes && finished) finishes = b.eos;
    }
    REQUIRE(runs_long);
    REQUIRE(finishes);
    for (int64_t eos : {*runs_long, *finishes}) {
      b.eos = eos;
      const auto best = beam_search(m, src, b);
      for (int64_t s = 0; s < src.batch; ++s) {
        CAPTURE(alpha);
        CAPTURE(eos);
        CAPTURE(s);
        std::vector<int64_t> seq = {b.bos};
        seq.insert(seq.end(), best[s].tokens.begin(), best[s].tokens.end());
        std::vector<int64_t> next(seq.begin() + 1, seq.end());
        if (best[s].finished) next.push_back(b.eos);
        const int64_t T = static_cast<int64_t>(next.size());
        seq.resize(static_cast<size_t>(T));
        Tokens one{std::vector<int64_t>(src.ids.begin() + s * src.len,
                                        src.ids.begin() + (s + 1) * src.len),
                   1,
                   src.len,
                   {src.lengths[s]}};
        NoGradGuard ng;
        Tensor logits = m.decode(Tokens{seq, 1, T, {}}, m.encode(one), one).data();  // (1, T, V)
        double lp = 0;
        for (int64_t t = 0; t < T; ++t) {
          std::vector<real> row(logits.data() + t * V, logits.data() + (t + 1) * V);
          log_softmax_rows(row.data(), 1, V);
          lp += row[next[t]];
        }
        CHECK(best[s].log_prob == doctest::Approx(lp).epsilon(kTol * 10));
        CHECK(best[s].score == doctest::Approx(lp / length_penalty(T, alpha)).epsilon(kTol * 10));
      }
    }
  }
}

namespace qkv::decode_tests {
// A scorer with hand-set next-token probabilities (ids: 0 pad, 1 bos, 2 eos, 3 a, 4 b):
//   after <bos>:    a .45   eos .35   b .15   pad .025  bos .025
//   after <bos> a:  eos .74  a .16    b .05   pad .025  bos .025
//   after <bos> b:  eos .5   a .2     b .2    pad .05   bos .05
// It follows each row's prefix through `from`, as the model's cache would.
struct ScriptedScorer {
  std::vector<std::vector<int64_t>> rows;
  int calls = 0;
  Tensor operator()(const std::vector<int64_t>& from, const std::vector<int64_t>& ids) {
    ++calls;
    const int64_t R = static_cast<int64_t>(ids.size());
    std::vector<std::vector<int64_t>> next(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r)
      if (!from.empty()) {
        next[r] = rows[from[r]];
        next[r].push_back(ids[r]);
      }
    rows = next;
    std::vector<real> logits;
    for (auto& p : rows) {
      std::vector<double> probs = {.025, .025, .35, .45, .15};
      if (p == std::vector<int64_t>{3}) probs = {.025, .025, .74, .16, .05};
      if (p == std::vector<int64_t>{4}) probs = {.05, .05, .5, .2, .2};
      for (double q : probs) logits.push_back(static_cast<real>(std::log(q)));
    }
    return Tensor::from_vector(logits, {R, 5});
  }
};
}  // namespace qkv::decode_tests

TEST_CASE(
    "beam_search on a hand-worked two-step example: the length penalty decides, and the search "
    "stops") {
  using namespace qkv::decode_tests;
  // Beam 2. Step 1 candidates: a ln .45 = -0.7985, eos ln .35 = -1.0498 (rank 1 < 2:
  // finished, empty output, len 1), b ln .15 = -1.8971 (live). Step 2: a eos
  // -0.7985 + ln .74 = -1.0996 (finished, len 2), a a -0.7985 + ln .16 = -2.6311
  // (live), b eos -2.5903 (rank 2: not finished), b a -3.5066 (live).
  // alpha = 0:   []  -1.0498  beats  [a]  -1.0996.
  // alpha = 0.6: lp(1) = 1, lp(2) = (7/6)^0.6 = 1.09690: [a] -1.0996 / 1.0969 = -1.00247 beats []
  // -1.0498. Either way two hypotheses are finished after step 2 and the best live one (a a,
  // -2.6311 / lp(2)) cannot beat them: the search stops after 2 of 5 steps.
  const double lp2 = std::pow(7.0 / 6.0, 0.6);
  for (double alpha : {0.0, 0.6}) {
    CAPTURE(alpha);
    ScriptedScorer scorer;
    BeamOptions o;
    o.beam = 2;
    o.alpha = alpha;
    o.max_new_tokens = 5;
    const auto best = beam_search(1, 5, o, std::ref(scorer));
    REQUIRE(best.size() == 1);
    CHECK(scorer.calls == 2);
    CHECK(best[0].finished);
    if (alpha == 0) {
      CHECK(best[0].tokens.empty());
      CHECK(best[0].log_prob == doctest::Approx(std::log(.35)).epsilon(1e-6));
      CHECK(best[0].score == doctest::Approx(std::log(.35)).epsilon(1e-6));
    } else {
      CHECK(best[0].tokens == std::vector<int64_t>{3});
      CHECK(best[0].log_prob == doctest::Approx(std::log(.45) + std::log(.74)).epsilon(1e-6));
      CHECK(best[0].score == doctest::Approx((std::log(.45) + std::log(.74)) / lp2).epsilon(1e-6));
    }
  }
  // The cap: max_new_tokens 1 finishes the live [a] (-0.7985) and [b] without <eos>; [a] wins.
  ScriptedScorer scorer;
  BeamOptions o;
  o.beam = 2;
  o.max_new_tokens = 1;
  const auto capped = beam_search(1, 5, o, std::ref(scorer));
  CHECK(scorer.calls == 1);
  CHECK(capped[0].tokens == std::vector<int64_t>{3});
  CHECK_FALSE(capped[0].finished);
  CHECK(capped[0].score == doctest::Approx(std::log(.45) / std::pow(6.0 / 6.0, 0.6)).epsilon(1e-6));
  CHECK(qkv::nn::length_penalty(2, 0.6) == doctest::Approx(lp2));
}

TEST_CASE("beam_search rejects bad options with the option's name") {
  using namespace qkv::decode_tests;
  Seq2SeqTransformer m(seq2seq_config(false, false, false));
  const Tokens src = padded_src();
  BeamOptions o;
  o.beam = 0;
  CHECK(has(error_of([&] { beam_search(m, src, o); }), "beam must be >= 1, got 0"));
  o = BeamOptions{};
  o.alpha = -1;
  CHECK(has(error_of([&] { beam_search(m, src, o); }), "alpha must be finite and >= 0"));
  o = BeamOptions{};
  o.max_new_tokens = 0;
  CHECK(has(error_of([&] { beam_search(m, src, o); }), "max_new_tokens must be >= 1"));
  o = BeamOptions{};
  o.eos = 11;
  CHECK(has(error_of([&] { beam_search(m, src, o); }),
            "special token id 11 outside the vocabulary [0, 11)"));
}

// ---- sampling ---------------------------------------------------------------------------

TEST_CASE("generate: temperature 0 and near 0, top_k = 1 and a tiny top_p all decode greedily") {
  using namespace qkv::decode_tests;
  GPT m(gpt_config(true));
  m.eval();
  const Tokens prompts = gpt_prompts();
  const size_t new_tokens = 8;
  std::vector<SampleOptions> greedy_like(4);
  greedy_like[0].temperature = 0;
  greedy_like[1].temperature = 1e-4;
  greedy_like[2].top_k = 1;
  greedy_like[3].top_p = 1e-6;
  std::vector<std::vector<int64_t>> argmax;  // temperature 0's tokens
  for (size_t i = 0; i < greedy_like.size(); ++i) {
    CAPTURE(i);
    greedy_like[i].max_new_tokens = static_cast<int64_t>(new_tokens);
    Generator gen = test_generator();
    const auto got = generate(m, prompts, greedy_like[i], gen);
    // Temperature T draws a token D below the largest logit with probability
    // below exp(-D / T), so never one 40 T below (e^-40 ~ 4e-18). The others
    // take the argmax of the same cached logits as temperature 0.
    const bool near_zero = i == 1;
    if (i == 0) argmax = got;
    if (i >= 2) CHECK(got == argmax);
    for (int64_t b = 0; b < prompts.batch; ++b) {
      CAPTURE(b);
      REQUIRE(got[b].size() == new_tokens);
      check_greedy_choices(m, prompt_row(prompts, b), got[b],
                           near_zero ? 40 * greedy_like[i].temperature : 0);
    }
  }
}

TEST_CASE("generate: a seed reproduces the text, another seed changes it, eos stops a row") {
  using namespace qkv::decode_tests;
  GPT m(gpt_config(false));
  m.eval();
  const Tokens prompts = gpt_prompts();
  SampleOptions o;
  o.max_new_tokens = 12;
  o.temperature = 1.5;
  o.top_k = 8;
  o.top_p = 0.95;
  // The same seed twice, and the seed next to it (splitmix64 makes neighbours unrelated).
  const uint64_t seed = test_seed();
  Generator g1(seed), g2(seed), g3(seed + 1);
  const auto a = generate(m, prompts, o, g1), b = generate(m, prompts, o, g2),
             c = generate(m, prompts, o, g3);
  CHECK(a == b);
  CHECK(a != c);
  for (auto& row : a) CHECK(row.size() == 12);
  // <eos> := a token row 0 samples: every row stops at its first <eos> (kept
  // in the output) or runs to 12 tokens.
  o.eos = a[0][3];
  Generator g4(seed);
  for (const auto& row : generate(m, prompts, o, g4)) {
    const auto at = std::find(row.begin(), row.end(), *o.eos);
    CHECK((at == row.end() ? row.size() == 12 : at + 1 == row.end()));
  }
  // Up to its <eos> a row's text is unchanged. Shown on one prompt: rows share
  // the generator, and a row that stops draws no more, so in a batch the
  // other rows' later draws move.
  const Tokens one{prompt_row(prompts, 0), 1, prompts.lengths[0], {}};
  o.eos.reset();
  Generator g5(seed), g6(seed);
  const std::vector<int64_t> free_run = generate(m, one, o, g5)[0];
  REQUIRE(free_run.size() == 12);
  o.eos = free_run[3];
  const auto first = std::find(free_run.begin(), free_run.end(), *o.eos) - free_run.begin();
  CHECK(generate(m, one, o, g6)[0] ==
        std::vector<int64_t>(free_run.begin(), free_run.begin() + first + 1));
}

TEST_CASE("sample_token: top_k keeps the k likeliest tokens, top_p the nucleus, in proportion") {
  using namespace qkv::decode_tests;
  // p = (.05, .5, .15, .3): logits ln p.
  const std::vector<real> logits = {real(std::log(.05)), real(std::log(.5)), real(std::log(.15)),
                                    real(std::log(.3))};
  auto counts = [&](const SampleOptions& o) {
    Generator g = test_generator();
    SampleScratch sc;
    std::vector<int> n(4, 0);
    for (int i = 0; i < 4000; ++i) n[sample_token(logits.data(), 4, o, g, sc)]++;
    return n;
  };
  SampleOptions o;
  o.top_k = 2;  // tokens 1 and 3, renormalised: .5/.8 and .3/.8
  auto n = counts(o);
  CHECK(n[0] == 0);
  CHECK(n[2] == 0);
  CHECK(n[1] / 4000.0 == doctest::Approx(.625).epsilon(0.05));
  o = SampleOptions{};
  o.top_p = 0.9;  // .5 + .3 = .8 < .9, + .15 = .95 >= .9: tokens 1, 3, 2
  n = counts(o);
  CHECK(n[0] == 0);
  CHECK(n[2] > 0);
  CHECK(n[2] / 4000.0 == doctest::Approx(.15 / .95).epsilon(0.15));
  o.top_p = 0.75;  // .5 < .75, .8 >= .75: tokens 1 and 3
  n = counts(o);
  CHECK(n[0] + n[2] == 0);
  CHECK(n[3] > 0);
  o = SampleOptions{};  // plain: every token, about in proportion
  n = counts(o);
  CHECK(n[0] / 4000.0 == doctest::Approx(.05).epsilon(0.3));
  CHECK(n[1] / 4000.0 == doctest::Approx(.5).epsilon(0.05));
}

TEST_CASE("generate rejects bad sampling options and over-long requests by name") {
  using namespace qkv::decode_tests;
  GPT m(gpt_config(true));
  const Tokens prompts = gpt_prompts();
  Generator g = test_generator();
  SampleOptions o;
  o.top_k = 0;
  CHECK(has(error_of([&] { generate(m, prompts, o, g); }), "top_k must be >= 1"));
  o = SampleOptions{};
  o.top_p = 0;
  CHECK(has(error_of([&] { generate(m, prompts, o, g); }), "top_p must be in (0, 1], got 0"));
  o.top_p = 1.5;
  CHECK(has(error_of([&] { generate(m, prompts, o, g); }), "top_p must be in (0, 1], got 1.5"));
  o = SampleOptions{};
  o.temperature = -0.5;
  CHECK(has(error_of([&] { generate(m, prompts, o, g); }), "temperature must be finite and >= 0"));
  o = SampleOptions{};
  o.max_new_tokens = 22;  // 4 + 22 - 1 > 24
  CHECK(has(error_of([&] { generate(m, prompts, o, g); }), "exceeds the model's max_positions 24"));
  Tokens empty_row = prompts;
  empty_row.lengths[1] = 0;
  CHECK(has(error_of([&] { generate(m, empty_row, SampleOptions{}, g); }), "prompt 1 is empty"));
  o = SampleOptions{};
  o.suppress = {3, 17};  // vocab 17: ids 0..16
  CHECK(has(error_of([&] { generate(m, prompts, o, g); }),
            "suppress holds token id 17, outside the vocabulary [0, 17)"));
  o.suppress.clear();
  for (int64_t id = 0; id < 17; ++id) o.suppress.push_back(id);
  CHECK(has(error_of([&] { generate(m, prompts, o, g); }),
            "suppress holds every one of the 17 tokens"));
}

TEST_CASE("generate never emits a suppressed token, greedy or sampled") {
  using namespace qkv::decode_tests;
  GPT m(gpt_config(true));
  m.eval();
  const Tokens prompts = gpt_prompts();
  for (const double temperature : {0.0, 1.0}) {
    Generator g = test_generator(temperature == 0 ? 1 : 2);
    SampleOptions o;
    o.max_new_tokens = 12;
    o.temperature = temperature;
    // Whatever the untrained model liked best at temperature 0 is now banned.
    const auto free_run = generate(m, prompts, o, g);
    o.suppress = {0, 1, free_run[0][0]};
    Generator g2 = test_generator(temperature == 0 ? 1 : 2);
    for (const auto& row : generate(m, prompts, o, g2))
      for (int64_t tok : row) CHECK((tok != 0 && tok != 1 && tok != free_run[0][0]));
  }
}

TEST_CASE(
    "sample_token and generate refuse an empty vocabulary (V = 0) naming the op, without reading a "
    "logit") {
  using namespace qkv::decode_tests;
  Generator g = test_generator();
  SampleScratch sc;
  SampleOptions greedy;
  greedy.temperature = 0;
  // No logits at all: a null pointer, so any read would crash under any build.
  for (const SampleOptions& o : {SampleOptions{}, greedy}) {
    CHECK(error_of([&] { sample_token(nullptr, 0, o, g, sc); }) ==
          "sample_token: no logits to sample from (V = 0)");
    CHECK(has(error_of([&] { sample_token(nullptr, -3, o, g, sc); }),
              "sample_token: no logits to sample from (V = -3)"));
  }
  GPT m(gpt_config(true));
  m.cfg.vocab = 0;
  CHECK(error_of([&] { generate(m, gpt_prompts(), SampleOptions{}, g); }) ==
        "generate: the model's vocabulary is empty (cfg.vocab = 0)");
}
