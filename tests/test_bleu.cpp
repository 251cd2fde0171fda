// Corpus BLEU (trainer/bleu.h) against values computed by hand, and its edge
// cases: no 4-gram match, a short hypothesis (brevity penalty), an empty
// corpus, an empty hypothesis, mismatched sizes; and the trainer's held-out
// BLEU and perplexity for pairs data.
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.h"
#include "trainer/bleu.h"
#include "trainer/trainer.h"
#include "test_seed.h"

using namespace qkv;
using qkv::testing::test_seed;
using qkv::train::bleu_stats;
using qkv::train::corpus_bleu;
using Corpus = std::vector<std::vector<int64_t>>;

TEST_CASE("corpus BLEU of a two-sentence corpus equals the hand computation") {
  // hyp 1: 1 2 3 4 5      ref 1: 1 2 3 4 6
  //   1-grams 1,2,3,4,5          -> 5, matched 4 (1,2,3,4)
  //   2-grams 12,23,34,45        -> 4, matched 3 (12,23,34)
  //   3-grams 123,234,345        -> 3, matched 2
  //   4-grams 1234,2345          -> 2, matched 1
  // hyp 2: 7 7 7          ref 2: 7 8 9 10
  //   1-grams 7,7,7              -> 3, matched 1 (clipped: 7 is once in the reference)
  //   2-grams 77,77              -> 2, matched 0
  //   3-grams 777                -> 1, matched 0
  //   4-grams none               -> 0
  // corpus: p1 = 5/8, p2 = 3/6, p3 = 2/4, p4 = 1/2
  //   c = 5 + 3 = 8, r = 5 + 4 = 9: BP = exp(1 - 9/8) = exp(-0.125) = 0.88249690
  //   geometric mean = (5/8 * 1/2 * 1/2 * 1/2)^(1/4) = (5/64)^(1/4) = 0.52868563
  //   BLEU = 100 * 0.88249690 * 0.52868563 = 46.656343
  const Corpus hyps{{1, 2, 3, 4, 5}, {7, 7, 7}}, refs{{1, 2, 3, 4, 6}, {7, 8, 9, 10}};
  const auto st = bleu_stats(hyps, refs);
  CHECK(st.matches == std::array<int64_t, 4>{5, 3, 2, 1});
  CHECK(st.totals == std::array<int64_t, 4>{8, 6, 4, 2});
  CHECK(st.hyp_len == 8);
  CHECK(st.ref_len == 9);
  CHECK(st.precision(1) == doctest::Approx(0.625));
  CHECK(st.precision(4) == doctest::Approx(0.5));
  CHECK(st.brevity_penalty() == doctest::Approx(0.88249690).epsilon(1e-7));
  CHECK(st.score() == doctest::Approx(46.656343).epsilon(1e-7));
  CHECK(corpus_bleu(hyps, refs) == doctest::Approx(46.656343).epsilon(1e-7));
  CHECK_THROWS_AS(st.precision(5), Error);
}

TEST_CASE("corpus BLEU is 100 for identical corpora and 0 without a single 4-gram match") {
  CHECK(corpus_bleu({{1, 2, 3, 4}, {5, 6, 7, 8, 9}}, {{1, 2, 3, 4}, {5, 6, 7, 8, 9}}) ==
        doctest::Approx(100));
  // hyp 1 2 3 4 against 1 2 3 5: p1 = 3/4, p2 = 2/3, p3 = 1/2, p4 = 0/1 -> no smoothing: 0,
  // though every other order matches.
  const auto st = bleu_stats({{1, 2, 3, 4}}, {{1, 2, 3, 5}});
  CHECK(st.matches == std::array<int64_t, 4>{3, 2, 1, 0});
  CHECK(st.totals == std::array<int64_t, 4>{4, 3, 2, 1});
  CHECK(st.score() == 0);
  // Sentences shorter than 4 tokens have no 4-gram at all: p4 = 0/0 -> 0 as well.
  CHECK(corpus_bleu({{1, 2, 3}}, {{1, 2, 3}}) == 0);
}

TEST_CASE("corpus BLEU: a hypothesis shorter than its reference pays the brevity penalty") {
  // hyp 1 2 3 4 against 1 2 3 4 5 6: every precision 1 (4/4, 3/3, 2/2, 1/1),
  // c = 4, r = 6: BP = exp(1 - 6/4) = exp(-0.5) = 0.60653066; BLEU = 60.653066.
  const auto st = bleu_stats({{1, 2, 3, 4}}, {{1, 2, 3, 4, 5, 6}});
  CHECK(st.brevity_penalty() == doctest::Approx(std::exp(-0.5)));
  CHECK(st.score() == doctest::Approx(60.653066).epsilon(1e-7));
  // Longer than the reference: no penalty. hyp 1 2 3 4 5 6 against 1 2 3 4:
  // p = 4/6, 3/5, 2/4, 1/3; BP = 1; BLEU = 100 * (1/15)^(1/4) = 50.813275.
  const auto longer = bleu_stats({{1, 2, 3, 4, 5, 6}}, {{1, 2, 3, 4}});
  CHECK(longer.brevity_penalty() == 1);
  CHECK(longer.score() == doctest::Approx(50.813275).epsilon(1e-7));
}

TEST_CASE("corpus BLEU of an empty corpus or empty hypotheses is 0; mismatched sizes throw") {
  const auto empty = bleu_stats({}, {});
  CHECK(empty.hyp_len == 0);
  CHECK(empty.ref_len == 0);
  CHECK(empty.brevity_penalty() == 1);  // c >= r
  CHECK(empty.score() == 0);            // but no n-gram of any order
  // An empty hypothesis: c = 0 < r = 3, BP = 0.
  const auto none = bleu_stats({{}}, {{1, 2, 3}});
  CHECK(none.brevity_penalty() == 0);
  CHECK(none.score() == 0);
  CHECK_THROWS_AS(bleu_stats({{1}}, {{1}, {2}}), Error);
}

TEST_CASE(
    "Trainer::evaluate on pairs reports the corpus BLEU of its answers and the teacher-forced "
    "perplexity without dropout or label smoothing") {
  train::TrainConfig c;
  c.task = "reverse";
  c.vocab = 6;
  c.min_len = 2;
  c.max_len = 5;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 32;
  c.batch = 32;
  c.steps = 60;
  c.warmup = 10;
  c.heldout = 40;
  c.dropout = 0.3;          // must be off in the evaluation
  c.label_smoothing = 0.2;  // must not enter the perplexity
  c.seed = test_seed();
  train::Trainer t(c);
  for (int i = 0; i < 60; ++i) t.step();
  const train::EvalResult r = t.evaluate();
  CHECK(t.model().is_training());  // evaluate() leaves the model as it found it
  std::vector<data::Pair> held;    // every held-out pair
  t.pairs->heldout().batch(0, t.pairs->heldout().size(), held);
  std::vector<std::vector<int64_t>> refs;
  for (const auto& p : held) refs.push_back(p.tgt);
  REQUIRE(r.predictions.size() == refs.size());
  CHECK(r.bleu == corpus_bleu(r.predictions, refs));
  // The same cross-entropy computed here: eval mode, plain cross-entropy, mean per target token.
  t.model().eval();
  const nn::TeacherForced f = t.model().forward_pairs(held);
  const double want = nn::cross_entropy(f.logits, f.targets, data::Vocab::kPad).item();
  t.model().train();
  CHECK(r.loss == doctest::Approx(want).epsilon(1e-5));
  CHECK(r.perplexity() == doctest::Approx(std::exp(want)).epsilon(1e-5));
  CHECK(r.loss < std::log(double(t.vocab.size())));  // learned something in 60 steps
}
