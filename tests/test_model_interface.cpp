// The one model interface (models/model.h) and the answers of every family
// (generation/answer.h): each family's teacher forcing is its own forward on
// the batch as it reads a pair, and nn::answer gives the decoders' answers.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "errors.h"
#include "generation/answer.h"
#include "generation/decode.h"
#include "generation/kv_cache.h"
#include "models/transformer.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_seed;

namespace {

TransformerConfig s2s_config() {
  TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 12;
  c.d_model = 16;
  c.heads = 2;
  c.encoder_layers = c.decoder_layers = 1;
  c.d_ff = 32;
  c.dropout = 0.1;
  c.seed = test_seed();
  return c;
}
GPTConfig gpt_config() {
  GPTConfig c;
  c.vocab = 12;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 32;
  c.max_positions = 20;
  c.dropout = 0.1;
  c.seed = test_seed();
  return c;
}
EncoderOnlyConfig encoder_config() {
  EncoderOnlyConfig c;
  c.vocab = c.classes = 12;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 32;
  c.dropout = 0.1;
  c.seed = test_seed();
  return c;
}

const std::vector<data::Pair> kPairs = {{{5, 6, 7}, {7, 6, 5}}, {{8, 9}, {9, 8}}};

std::vector<real> values(const Var& v) { return v.data().to_vector(); }

}  // namespace

TEST_CASE("forward_pairs is each family's own forward on the batch as it reads a pair") {
  Seq2SeqTransformer s2s(s2s_config());
  GPT gpt(gpt_config());
  EncoderOnlyModel enc(encoder_config());
  for (Model* m : std::initializer_list<Model*>{&s2s, &gpt, &enc}) m->eval();

  const data::Batch b = data::collate_pairs(kPairs);
  const TeacherForced fs = s2s.forward_pairs(kPairs);
  CHECK(values(fs.logits) == values(s2s.forward(b.src, b.tgt_in)));
  CHECK(fs.targets == b.tgt_out);
  CHECK(fs.target_tokens == 4 + 3);  // each target and its </s>

  const data::LMBatch lb = data::collate_prompted(kPairs);
  const TeacherForced fg = gpt.forward_pairs(kPairs);
  CHECK(values(fg.logits) == values(gpt.forward(lb.ids)));
  CHECK(fg.targets == lb.targets);
  CHECK(fg.target_tokens == lb.target_tokens);

  const TeacherForced fe = enc.forward_pairs(kPairs);
  CHECK(values(fe.logits) == values(enc.forward(data::right_padded({{5, 6, 7}, {8, 9}}))));
  CHECK(fe.targets == std::vector<int64_t>{7, 6, 5, 9, 8, data::kPad});
  CHECK(fe.target_tokens == 5);  // one label per source token, no </s>
}

TEST_CASE("the interface says what each family can read and how long its sequences are") {
  Seq2SeqTransformer s2s(s2s_config());
  GPT gpt(gpt_config());
  EncoderOnlyModel enc(encoder_config());
  CHECK(std::string(s2s.kind()) == "seq2seq");
  CHECK(std::string(gpt.kind()) == "gpt");
  CHECK(std::string(enc.kind()) == "encoder");
  CHECK(s2s.max_positions() == 0);  // sinusoidal: unbounded
  CHECK(gpt.max_positions() == 20);
  CHECK(gpt.positions_to_answer(3, 4) == 7);  // "a b c <s> x y z" without the last z
  CHECK(s2s.positions_to_answer(3, 4) == 4);
  CHECK(enc.positions_to_answer(3, 3) == 3);
  CHECK(gpt.reads_text());
  CHECK_FALSE(s2s.reads_text());
  CHECK(error_of([&] { s2s.forward_text(data::LMBatch{}); }) ==
        "seq2seq model: reads (source, target) pairs, not plain text (a language model, gpt, "
        "does)");
  EncoderOnlyConfig none = encoder_config();
  none.classes = 0;
  CHECK(error_of([&] { EncoderOnlyModel{none}; }) ==
        "EncoderOnlyModel: vocab and classes must be positive, got 12 and 0");
  CHECK(error_of([&] {
          enc.forward_pairs({{{5, 6, 7}, {7, 6}}});
        }) == "EncoderOnlyModel: a source of 3 tokens has 2 labels (one label per source token)");
  CHECK(s2s.source_attention({5, 6, 7}, {7, 6}).size() == 1);  // one decoder layer
  CHECK(gpt.source_attention({5, 6, 7}, {7, 6}).empty());
}

TEST_CASE("answer gives each family's decoder output and leaves the model in its mode") {
  Seq2SeqTransformer s2s(s2s_config());
  GPT gpt(gpt_config());
  EncoderOnlyModel enc(encoder_config());
  const std::vector<data::Seq> sources = {{5, 6, 7}, {8, 9}};
  AnswerOptions o;
  o.max_new_tokens = 6;

  // seq2seq: greedy_decode's output, in eval mode (dropout off), and the
  // model back in training mode afterwards.
  s2s.train();
  const std::vector<data::Seq> a = answer(s2s, sources, o);
  CHECK(s2s.is_training());
  s2s.eval();
  DecodeOptions d;
  d.max_new_tokens = 6;
  CHECK(a == greedy_decode(s2s, data::right_padded(sources), d));
  o.method = "beam";
  o.beam = 1;  // a beam of one is greedy
  CHECK(answer(s2s, sources, o) == a);
  CHECK_FALSE(s2s.is_training());  // left as it was: eval

  // gpt: the greedy continuation of "source <s>" without its </s>.
  o.method = "greedy";
  const std::vector<data::Seq> g = answer(gpt, sources, o);
  gpt.eval();
  for (size_t i = 0; i < sources.size(); ++i) {
    data::Seq prompt = sources[i];
    prompt.push_back(data::kBos);
    SampleOptions so;
    so.temperature = 0;
    so.eos = data::kEos;
    so.max_new_tokens = 6;
    Generator unused(0);
    data::Seq want = generate(gpt, data::right_padded({prompt}), so, unused).front();
    if (!want.empty() && want.back() == data::kEos) want.pop_back();
    CHECK(g[i] == want);
  }

  // encoder: the argmax label of every source token.
  const std::vector<data::Seq> e = answer(enc, sources, o);
  enc.eval();
  const Tensor logits = enc.forward(data::right_padded(sources)).data();  // (2, 3, 12)
  for (size_t b = 0; b < sources.size(); ++b) {
    REQUIRE(e[b].size() == sources[b].size());
    for (size_t i = 0; i < sources[b].size(); ++i) {
      const real* row = logits.data() + (b * 3 + i) * 12;
      CHECK(e[b][i] == std::max_element(row, row + 12) - row);
    }
  }

  o.method = "beam";
  CHECK(error_of([&] { answer(gpt, sources, o); }) ==
        "answer: beam search here is for the encoder-decoder (seq2seq), not gpt");
  CHECK(error_of([&] { answer(enc, sources, o); }) ==
        "answer: beam search here is for the encoder-decoder (seq2seq), not encoder");
  o.method = "sample";
  CHECK(error_of([&] { answer(s2s, sources, o); }) ==
        "answer: the method is 'greedy' or 'beam', got 'sample'");
  o.method = "greedy";
  CHECK(error_of([&] { answer(s2s, {{}}, o); }) == "answer: a source is empty");
  CHECK(error_of([&] { answer(gpt, {data::Seq(20, 5)}, o); }) ==
        "answer: a source of 20 tokens and its <s> do not fit the position table of 20");
}

TEST_CASE(
    "a sparse or linear model answers with the key/value cache, greedy and beam, as without it") {
  TransformerConfig c = s2s_config();
  c.dropout = 0;
  c.attention = AttentionKernel::Sparse;
  c.window = 2;
  c.global_every = 3;
  Seq2SeqTransformer s2s(c);
  s2s.eval();
  CHECK(can_beam_search(s2s));
  const std::vector<data::Seq> sources = {{5, 6, 7, 8, 9}, {8, 9}};
  AnswerOptions o;
  o.max_new_tokens = 5;
  for (const char* method : {"greedy", "beam"}) {
    CAPTURE(method);
    o.method = method;
    o.use_cache = true;
    const std::vector<data::Seq> cached = answer(s2s, sources, o);
    o.use_cache = false;  // the decoder over the whole prefix, with the model's own kernel
    CHECK(answer(s2s, sources, o) == cached);
  }
  DecodeOptions d;
  d.max_new_tokens = 5;
  d.use_cache = false;
  o.method = "greedy";
  CHECK(answer(s2s, sources, o) == greedy_decode(s2s, data::right_padded(sources), d));

  GPTConfig g = gpt_config();
  g.dropout = 0;
  g.attention = AttentionKernel::Linear;
  GPT gpt(g);
  gpt.eval();
  o.max_new_tokens = 3;
  o.use_cache = false;  // the same computation as by hand: equal tokens, bit for bit
  const std::vector<data::Seq> got = answer(gpt, {{5, 6}}, o);
  // By hand: the whole sequence through the model, the argmax of the last position.
  data::Seq seq{5, 6, data::kBos}, want;
  for (int k = 0; k < 3; ++k) {
    const Tensor logits = gpt.forward(data::right_padded({seq})).data();
    const real* last = logits.data() + (static_cast<int64_t>(seq.size()) - 1) * g.vocab;
    const int64_t next = std::max_element(last, last + g.vocab) - last;
    if (next == data::kEos) break;
    want.push_back(next);
    seq.push_back(next);
  }
  CHECK(got.front() == want);
  // With the cache (linear attention's running sums) the logits equal these to
  // rounding, so each cached token is a largest logit of the recompute at its
  // position within that rounding (a near-tie may pick the other token).
  o.use_cache = true;
  const data::Seq cached = answer(gpt, {{5, 6}}, o).front();
  data::Seq prefix{5, 6, data::kBos};
  for (int64_t tok : cached) {
    const Tensor logits = gpt.forward(data::right_padded({prefix})).data();
    const real* last = logits.data() + (static_cast<int64_t>(prefix.size()) - 1) * g.vocab;
    double best = last[0], scale = 1;
    for (int64_t v = 0; v < g.vocab; ++v) {
      best = std::max(best, static_cast<double>(last[v]));
      scale = std::max(scale, std::abs(static_cast<double>(last[v])));
    }
    CHECK(best - last[tok] <= 4e-5 * scale);
    prefix.push_back(tok);
  }
}

TEST_CASE("the attention settings change the model: no scale, and a window past the keys") {
  GPTConfig g = gpt_config();
  g.dropout = 0;
  GPT scaled(g);
  g.scaled = false;
  GPT unscaled(g);
  CHECK(unscaled.layers[0]->self_attn->scale == 1);
  CHECK(scaled.layers[0]->self_attn->scale == 0);
  const Tokens ids = data::right_padded({{5, 6, 7, 8}});
  CHECK(values(scaled.forward(ids)) != values(unscaled.forward(ids)));  // same weights (seed)
  // Cached decoding uses the module's scale: it equals the full forward.
  unscaled.eval();
  KVCache cache = start_generation(unscaled, 1, 4);
  const Tensor step = forward_step(unscaled, cache, {5, 6, 7, 8}, 4);
  const std::vector<real> full = values(unscaled.forward(ids));
  const std::vector<real> cached = step.to_vector();
  REQUIRE(full.size() == cached.size());
  for (size_t i = 0; i < full.size(); ++i)
    CHECK(cached[i] == doctest::Approx(full[i]).epsilon(1e-4));
  // A sparse window longer than a short sequence is every key: dense attention.
  g.scaled = true;
  g.attention = AttentionKernel::Sparse;
  g.window = 64;
  g.global_every = 64;
  GPT sparse(g);
  const std::vector<real> a = values(sparse.forward(ids)), b = values(scaled.forward(ids));
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5));
}

TEST_CASE(
    "an answer never holds <pad> or <s>: greedy and beam (seq2seq) and the gpt's greedy skip them "
    "even where the model's largest logit is theirs") {
  // Output biases that make <pad> the likeliest token and <s> the next:
  // greedy_decode itself (no suppress) answers them; answer() does not.
  Seq2SeqTransformer s2s(s2s_config());
  s2s.eval();
  {
    NoGradGuard ng;
    s2s.lm_head->bias.data().zero_();
    s2s.lm_head->bias.data().data()[data::kPad] = 100;
    s2s.lm_head->bias.data().data()[data::kBos] = 50;
  }
  const std::vector<data::Seq> src{{5, 6, 7}, {8, 9}};
  DecodeOptions raw;
  raw.max_new_tokens = 4;
  const auto plain = greedy_decode(s2s, data::right_padded(src), raw);
  REQUIRE(plain[0].front() == data::kPad);  // the test's premise
  for (const char* method : {"greedy", "beam"}) {
    AnswerOptions o;
    o.method = method;
    o.max_new_tokens = 4;
    CAPTURE(method);
    for (const data::Seq& a : answer(s2s, src, o)) {
      CHECK(std::count(a.begin(), a.end(), data::kPad) == 0);
      CHECK(std::count(a.begin(), a.end(), data::kBos) == 0);
    }
  }
  // The gpt's head has no bias: a zero head makes every logit 0, and a tie
  // goes to the lowest id, <pad>.
  GPTConfig gc = gpt_config();
  gc.tie_weights = false;
  GPT gpt(gc);
  gpt.eval();
  {
    NoGradGuard ng;
    gpt.lm_head->weight.data().zero_();
  }
  AnswerOptions o;
  o.max_new_tokens = 4;
  for (const data::Seq& a : answer(gpt, src, o)) {
    CHECK(std::count(a.begin(), a.end(), data::kPad) == 0);
    CHECK(std::count(a.begin(), a.end(), data::kBos) == 0);
  }
}
