// A mixture of experts answers the same way however it is asked. Capacity
// (tokens past ceil(cf N k / E) dropped) is a training device: it applies to a
// forward that records a graph in training mode, and at inference nothing is
// dropped (nn/moe.h). Before that rule, capacity was counted over whatever
// rows a forward held, so decoding with the KV cache (one row a step) and
// without it (the whole prefix) gave different tokens, a sequence's logits
// moved with the other sequences of its batch, and the held-out evaluation
// moved with its chunk size. Each case below uses a capacity factor small
// enough that a training forward drops assignments (the decoding cases check
// it on their own rows); each of these cases failed under the old rule.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "decode_tests.h"
#include "generation/decode.h"
#include "generation/sampling.h"
#include "models/gpt.h"
#include "nn/moe.h"
#include "test_seed.h"
#include "trainer/trainer.h"

using namespace qkv;
using namespace qkv::nn;

using qkv::testing::test_seed;

namespace {

constexpr MoESettings kTightMoE{4, 2, 0.5};  // capacity ceil(0.5 N 2 / 4) = N / 4

GPTConfig moe_gpt_config() {
  GPTConfig c = decode_tests::gpt_config(true);
  c.moe = kTightMoE;
  return c;
}

TransformerConfig moe_seq2seq_config() {
  TransformerConfig c = decode_tests::seq2seq_config(true, false, false);
  c.moe = kTightMoE;
  return c;
}

// The assignments the model's MoE layers dropped in their last forward.
int64_t dropped(const Module& m) {
  int64_t n = 0;
  if (auto* moe = dynamic_cast<const MoE*>(&m); moe && moe->routing()) n += moe->routing()->dropped;
  for (const auto& [name, child] : m.children()) n += dropped(*child);
  return n;
}

double max_abs_diff(const real* a, const real* b, int64_t n) {
  double d = 0;
  for (int64_t i = 0; i < n; ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

}  // namespace

TEST_CASE("MoE keeps every assignment at inference (eval mode or no graph), drops in training") {
  MoE moe(Activation::ReLU, 2, 3, {4, 2, 0.5});  // capacity 2 of 16 assignments in training
  moe.router->weight.data().copy_(Tensor::from_vector({4, 2, 2, 4, -4, -4, -4, -4}, {4, 2}));
  Tensor X = Tensor::zeros({8, 2});
  for (int n = 0; n < 8; ++n) X.data()[n * 2 + (n < 4 ? 0 : 1)] = 1;
  moe(Var(X, true));
  CHECK(moe.routing()->dropped == 12);  // a training step: capacity applies
  {
    NoGradGuard no_grad;  // no graph: inference
    moe(Var(X));
    CHECK(moe.routing()->dropped == 0);
    CHECK(moe.routing()->capacity == 8);
  }
  moe.eval();  // eval mode, even with a graph: inference
  const Tensor y = moe(Var(X, true)).data();
  CHECK(moe.routing()->dropped == 0);
  // Each token's row equals the layer on that token alone.
  for (int64_t n = 0; n < 8; ++n) {
    const Tensor yn = moe(Var(X.slice0(n, n + 1).clone())).data();
    CHECK(max_abs_diff(yn.data(), y.data() + n * 2, 2) == 0);
  }
  moe.train();
  moe(Var(X, true));
  CHECK(moe.routing()->dropped == 12);
}

TEST_CASE("an MoE GPT's greedy continuation is the same with the KV cache and without it") {
  GPT m(moe_gpt_config());
  // Prompts of lengths 5, 3, 1 in one padded batch.
  const Tokens prompt{{3, 4, 5, 6, 7, 8, 9, 10, 0, 0, 11, 0, 0, 0, 0}, 3, 5, {5, 3, 1}};
  m.forward(prompt);  // the same rows in a training step drop assignments
  REQUIRE(dropped(m) > 0);
  m.eval();
  SampleOptions o;
  o.temperature = 0;
  o.max_new_tokens = 12;
  Generator g1(1), g2(1);
  o.use_cache = false;
  const auto want = generate(m, prompt, o, g1);
  o.use_cache = true;
  const auto got = generate(m, prompt, o, g2);
  CHECK(got == want);
}

TEST_CASE("an MoE seq2seq's greedy answer is the same with the KV cache and without it") {
  for (int64_t seed = 0; seed < 3; ++seed) {
    TransformerConfig c = moe_seq2seq_config();
    c.seed = test_seed(seed);
    Seq2SeqTransformer m(c);
    const Tokens src = decode_tests::padded_src();
    m.encode(src);  // the same rows in a training step drop assignments
    REQUIRE(dropped(m) > 0);
    m.eval();
    DecodeOptions o;
    o.max_new_tokens = 12;
    o.ignore_eos = true;
    o.use_cache = false;
    const auto want = greedy_decode(m, src, o);
    o.use_cache = true;
    const auto got = greedy_decode(m, src, o);
    CAPTURE(seed);
    CHECK(got == want);
  }
}

TEST_CASE("an MoE GPT's logits for a sequence alone equal its logits in a padded batch") {
  GPT m(moe_gpt_config());
  const int64_t V = m.cfg.vocab;
  const std::vector<int64_t> seq{3, 9, 4, 12, 5};
  // alone: (1, 5)
  NoGradGuard no_grad;
  const Tensor alone = m.forward(Tokens{seq, 1, 5, {}}).data();
  // second of three rows, padded to 8, beside two other sequences
  std::vector<int64_t> ids{1, 2, 3, 4, 5,  6,  7,  8, 0, 0, 0, 0,
                           0, 0, 0, 0, 16, 15, 14, 0, 0, 0, 0, 0};
  std::copy(seq.begin(), seq.end(), ids.begin() + 8);
  const Tensor batch = m.forward(Tokens{ids, 3, 8, {8, 5, 3}}).data();  // (3, 8, V)
  REQUIRE(dropped(m) == 0);  // no graph: inference, in training mode too
  CHECK(max_abs_diff(alone.data(), batch.data() + 8 * V, 5 * V) <= 1e-5);
}

TEST_CASE("an MoE model's held-out evaluation does not depend on its chunk size") {
  train::TrainConfig c;
  c.task = "reverse";
  c.vocab = 6;
  c.min_len = 2;
  c.max_len = 6;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 16;
  c.batch = 16;
  c.steps = 20;
  c.warmup = 5;
  c.heldout = 24;
  c.experts = 4;
  c.experts_per_token = 2;
  c.capacity_factor = real(0.5);
  c.seed = test_seed();
  train::Trainer t(c);
  for (int i = 0; i < 20; ++i) t.step();
  const train::EvalResult all = t.evaluate(t.pairs->heldout(), 500);
  for (int64_t chunk : {1, 5}) {
    const train::EvalResult part = t.evaluate(t.pairs->heldout(), chunk);
    CAPTURE(chunk);
    CHECK(part.sequences == all.sequences);
    CHECK(part.exact == all.exact);
    CHECK(part.tokens_right == all.tokens_right);
    CHECK(part.loss == doctest::Approx(all.loss).epsilon(1e-5));
  }
}
