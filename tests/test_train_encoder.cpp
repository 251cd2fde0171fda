// The trainer with the encoder-only model (--model encoder, one label per
// source token): its settings, its data (targets as long as their sources),
// its evaluation (labels scored, no </s>), its checkpoints and its decoding.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "test_seed.h"
#include "trainer/trainer.h"

using namespace qkv;
using qkv::testing::TempDir;
using qkv::testing::test_seed;
using qkv::testing::write_file;

namespace {

train::TrainConfig encoder_config() {
  train::TrainConfig c;
  c.model = "encoder";
  c.task = "reverse";
  c.vocab = 6;
  c.min_len = 2;
  c.max_len = 5;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 32;
  c.batch = 16;
  c.steps = 20;
  c.warmup = 2;
  c.heldout = 30;
  c.min_lr = c.lr * real(0.05);  // what the Trainer makes of kAutoMinLr, for validate()
  c.seed = test_seed();
  return c;
}

}  // namespace

TEST_CASE("first_length_mismatch finds the first pair, in file order, whose lengths differ") {
  const std::vector<data::TokenPair> ok = {{{"a", "b"}, {"x", "y"}, 1}, {{"c"}, {"z"}, 3}};
  CHECK(data::first_length_mismatch(ok) == nullptr);
  const std::vector<data::TokenPair> bad = {
      {{"a"}, {"x"}, 1}, {{"a", "b"}, {"x"}, 4}, {{"c"}, {"x", "y"}, 5}};
  const data::TokenPair* p = data::first_length_mismatch(bad);
  REQUIRE(p != nullptr);
  CHECK(p->line == 4);
}

TEST_CASE("--model encoder is a valid setting; learned positions and --tie are refused by name") {
  train::TrainConfig c = encoder_config();
  CHECK_NOTHROW(train::validate(c, ""));
  c.positions = "learned";
  CHECK_THROWS_WITH_AS(train::validate(c, ""), doctest::Contains("--positions: the encoder model"),
                       Error);
  c = encoder_config();
  c.tie = true;
  CHECK_THROWS_WITH_AS(train::validate(c, ""), doctest::Contains("--tie: the encoder model"),
                       Error);
  c = encoder_config();
  c.model = "mamba";
  CHECK_THROWS_WITH_AS(
      train::validate(c, ""),
      doctest::Contains("--model: expected seq2seq, gpt, encoder, bert or vit, got 'mamba'"),
      Error);
}

TEST_CASE("the encoder model's settings read back from its model_config, one vocabulary only") {
  train::TrainConfig c = encoder_config();
  c.pre_ln = true;
  c.activation = "gelu";
  c.attention = "memory-efficient";
  c.d_k = 4;  // apart from d_model / heads = 8
  c.dropout = real(0.25);
  train::Trainer t(c);
  CHECK(std::string(t.model().kind()) == "encoder");
  CHECK(t.model().vocab_size() == t.vocab.size());  // labels are tokens of the one vocabulary
  const train::json mc = nn::config_to_json(t.model());
  CHECK(mc.value("d_k", 0) == 4);  // --d-k reached the encoder's attention
  train::TrainConfig back;
  back.tie = true;  // the encoder has none: reading its config clears it
  train::set_arch_from_model(back, "encoder", mc, "f");
  for (const char* k : {"model", "d_model", "heads", "layers", "d_ff", "dropout", "pre_ln", "tie",
                        "positions", "activation", "attention", "d_k"}) {
    CAPTURE(k);
    CHECK(back.to_json()[k] == t.cfg.to_json()[k]);
  }
  train::json other = mc;
  other["classes"] = mc["vocab"].get<int64_t>() + 1;
  CHECK_THROWS_WITH_AS(train::set_arch_from_model(back, "encoder", other, "f"),
                       doctest::Contains("f: vocab 9 != classes 10"), Error);
}

TEST_CASE("pairs whose target is not as long as the source are refused naming file and line") {
  TempDir dir;
  const std::string f = dir.file("tags.tsv"), v = dir.file("valid.tsv");
  // Line 5 (after a blank line) is the first whose lengths differ; the
  // training/held-out split must not change which line is named.
  write_file(f, "ab\tAB\nbc\tBC\ncd\tCD\n\nabc\tAB\nabcd\tA\nda\tDA\n");
  train::TrainConfig c = encoder_config();
  c.data = f;
  CHECK_THROWS_WITH_AS(
      train::Trainer{c},
      doctest::Contains(("--model encoder: " + f +
                         ":5: the source has 3 tokens and the target 2 (the encoder model gives "
                         "one label per source token)")
                            .c_str()),
      Error);
  // The same data trains the encoder-decoder, whose answers may be any length.
  c.model = "seq2seq";
  CHECK_NOTHROW(train::Trainer{c});
  // A held-out file is checked too.
  write_file(f, "ab\tAB\nbc\tBC\ncd\tCD\n");
  write_file(v, "ab\tAB\nbca\tBC\n");
  c.model = "encoder";
  c.valid = v;
  CHECK_THROWS_WITH_AS(train::Trainer{c}, doctest::Contains((v + ":2: the source has 3").c_str()),
                       Error);
}

TEST_CASE("the encoder answers one label per source token, scored without a </s>") {
  train::Trainer t(encoder_config());
  const std::vector<data::Seq> sources = {{3, 4, 5}, {6, 7}};
  const std::vector<data::Seq> out = t.answer(sources);
  REQUIRE(out.size() == 2);
  CHECK(out[0].size() == 3);
  CHECK(out[1].size() == 2);
  // Token accuracy counts the labels of the expected answers, no end token.
  const train::EvalResult r = t.evaluate();
  int64_t labels = 0;
  std::vector<data::Pair> held;
  t.pairs->heldout().batch(0, t.pairs->heldout().size(), held);
  for (const data::Pair& p : held) labels += static_cast<int64_t>(p.tgt.size());
  CHECK(r.sequences == static_cast<int64_t>(t.pairs->heldout().size()));
  CHECK(r.tokens == labels);
}

TEST_CASE("--decode beam is refused for the encoder model, naming the flag and the model") {
  train::Trainer t(encoder_config());
  t.decoding.method = "beam";
  CHECK_THROWS_WITH_AS(t.check_decoding(), doctest::Contains("--decode beam: the encoder model"),
                       Error);
  CHECK_THROWS_WITH_AS(t.answer({{3, 4}}), doctest::Contains("--decode beam"), Error);
  t.decoding.method = "greedy";
  CHECK_NOTHROW(t.check_decoding());
}

TEST_CASE("an encoder run resumed from its checkpoint matches the uninterrupted run bit for bit") {
  TempDir dir;
  const std::string path = dir.file("enc.safetensors");
  train::TrainConfig c = encoder_config();
  c.dropout = real(0.1);  // the dropout stream must resume too
  train::Trainer straight(c);
  for (int i = 0; i < 12; ++i) straight.step();
  {
    train::Trainer first(c);
    for (int i = 0; i < 5; ++i) first.step();
    first.save(path);
  }
  train::Trainer resumed = train::Trainer::resume(path);
  CHECK(resumed.cfg.model == "encoder");
  CHECK(resumed.step_count() == 5);
  for (int i = 5; i < 12; ++i) resumed.step();
  const auto a = straight.model().named_parameters(), b = resumed.model().named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(max_abs_diff(a[i].second.data(), b[i].second.data()) == 0);
  }
  // The checkpoint is a model file of the library too.
  CHECK(nn::model_kind(path) == "encoder");
  CHECK(nn::load_encoder_only(path)->num_parameters() == straight.model().num_parameters());
}
