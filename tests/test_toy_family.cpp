// A model family added from outside the library (tests/toy_family.h: its own
// file, no line of the library changed) trains through the trainer's code
// path, evaluates, answers, and saves and loads as a checkpoint and as a
// model file: the registration shape of trainer/family.h holds. So does a kind
// of positions of its own (trainer/positions.h), listed by a family's row.
#include <doctest/doctest.h>

#include <string>

#include "errors.h"
#include "temp_dir.h"
#include "test_seed.h"
#include "toy_family.h"
#include "trainer/positions.h"
#include "trainer/trainer.h"

using namespace qkv;
using qkv::testing::error_of;
using qkv::testing::TempDir;
using qkv::testing::test_seed;

namespace {

train::TrainConfig bag_config() {
  train::TrainConfig c;
  c.model = "bag";
  c.task = "copy";  // each label is its token: a per-token model can learn it
  c.vocab = 6;
  c.min_len = 2;
  c.max_len = 5;
  c.d_model = 16;
  c.batch = 16;
  c.steps = 60;
  c.warmup = 1;
  c.lr = real(0.05);
  c.heldout = 30;
  c.min_lr = c.lr * real(0.05);  // what the Trainer makes of kAutoMinLr, for validate()
  c.seed = test_seed();
  return c;
}

// The logits of `m` on the first held-out pairs, as numbers.
std::vector<real> logits_of(nn::Model& m, const std::vector<data::Pair>& pairs) {
  NoGradGuard no_grad;
  m.eval();
  const Tensor t = m.forward_pairs(pairs).logits.data();
  return std::vector<real>(t.data(), t.data() + t.numel());
}

}  // namespace

TEST_CASE("a toy family registered from a test's own file trains, answers, saves and loads") {
  const toy::BagFamilyRegistered registered;
  TempDir dir;
  train::Trainer t(bag_config());
  CHECK(std::string(t.model().kind()) == "bag");
  CHECK(&t.family() == train::find_family("bag"));
  CHECK(train::family_names() == "seq2seq, gpt, encoder, bert, vit or bag");

  // Training through the trainer's step: the loss falls, and copying is learnt.
  const real first = t.step();
  real last = first;
  while (t.step_count() < t.cfg.steps) last = t.step();
  CHECK(last < 0.5 * first);
  const train::EvalResult r = t.evaluate();
  CHECK(r.token_acc() > 0.9);  // labels scored alone (labels_tokens), no </s>

  // The family's answerer: the label of every source token.
  std::vector<data::Pair> held;
  t.pairs->heldout().batch(0, 4, held);
  const std::vector<data::Seq> a = t.answer({held[0].src});
  CHECK(a.front().size() == held[0].src.size());
  t.decoding.method = "beam";
  CHECK_THROWS_WITH_AS(t.check_decoding(),
                       "--decode beam: the bag model labels every token at once", Error);
  t.decoding.method = "greedy";

  // A training checkpoint: resumed, the same model, step and logits.
  const std::string ckpt = dir.file("bag.ckpt");
  t.save(ckpt);
  train::Trainer back = train::Trainer::resume(ckpt);
  CHECK(std::string(back.model().kind()) == "bag");
  CHECK(back.step_count() == t.step_count());
  CHECK(back.cfg.d_model == t.cfg.d_model);
  CHECK(logits_of(back.model(), held) == logits_of(t.model(), held));

  // A model file: nn::load_model finds the family's codec by its kind.
  const std::string file = dir.file("bag.safetensors");
  nn::save_model(t.model(), file);
  CHECK(nn::model_kind(file) == "bag");
  std::unique_ptr<nn::Model> m = nn::load_model(file);
  CHECK(logits_of(*m, held) == logits_of(t.model(), held));
  CHECK(nn::answer(*m, {held[0].src}) == a);
}

namespace {

// A kind of positions of the test's own: it adds nothing to the embedding and
// hands attention nothing (the bag model reads no positions), with a rule of
// its own on the run.
train::PositionKind counted_positions() {
  train::PositionKind k;
  k.name = "counted";
  k.help = "counted (a toy)";
  k.check = [](const train::TrainConfig& c, const train::Require& require) {
    require(c.d_model >= 8, "d_model", "counted positions need d_model >= 8");
  };
  return k;
}

}  // namespace

TEST_CASE(
    "a position kind registered from a test's own code is read from the tables: a family that "
    "lists it validates, trains and resumes with it; one that does not refuses it; removed, it "
    "is unknown") {
  const toy::BagFamilyRegistered registered;
  TempDir dir;
  {
    train::register_position_kind(counted_positions());
    struct Unregister {
      ~Unregister() { train::unregister_position_kind("counted"); }
    } unregister;
    // The bag family's row lists it, its default first.
    train::Family bag = *train::find_family("bag");
    bag.model.positions = "counted sinusoidal";
    train::unregister_family("bag");
    train::register_family(bag);

    CHECK(train::position_kinds().names() == "sinusoidal, learned, rope, relative or counted");
    CHECK(train::position_help() ==
          "sinusoidal, learned, rope (gpt), relative (T5) or counted (a toy)");
    train::TrainConfig c = bag_config();
    c.positions = "counted";
    c.steps = 2;
    CHECK_NOTHROW(train::validate(c, ""));
    // The kind's own rule, naming the flag.
    c.d_model = 4;
    CHECK(error_of([&] { train::validate(c, ""); }) ==
          "--d-model: counted positions need d_model >= 8");
    c.d_model = 16;
    // A family whose row does not list it refuses it, in its own words...
    train::TrainConfig gpt = c;
    gpt.model = "gpt";
    CHECK(error_of([&] { train::validate(gpt, ""); }) ==
          "--positions: the gpt model has a learned position table, rotary positions (rope) or "
          "T5's relative bias (relative), not counted");
    // ... and a row with no words of its own by its list.
    train::TrainConfig learned = c;
    learned.positions = "learned";
    CHECK(error_of([&] { train::validate(learned, ""); }) ==
          "--positions: the bag model takes counted or sinusoidal positions, not 'learned'");

    // It trains, and a checkpoint resumes with it.
    train::Trainer t(c);
    t.step();
    const std::string ckpt = dir.file("counted.ckpt");
    t.save(ckpt);
    CHECK(train::Trainer::resume(ckpt).cfg.positions == "counted");
  }
  CHECK(train::find_position_kind("counted") == nullptr);
  train::TrainConfig c = bag_config();
  c.positions = "counted";
  CHECK(error_of([&] { train::validate(c, ""); }) ==
        "--positions: expected sinusoidal, learned, rope or relative, got 'counted'");
}

TEST_CASE(
    "the built-in position kinds hand attention their settings and are recognised back from a "
    "model file's") {
  for (const char* name : {"sinusoidal", "learned", "rope", "relative"}) {
    CAPTURE(name);
    train::TrainConfig c;
    c.positions = name;
    c.rope_base = 500;
    c.rel_buckets = 8;
    c.rel_max_distance = 20;
    nn::AttentionSettings a;
    train::attention_to_model(c, a);
    CHECK(a.rope_base == (c.positions == "rope" ? 500 : 0));
    CHECK(a.rel_buckets == (c.positions == "relative" ? 8 : 0));
    train::TrainConfig back;
    back.positions = "sinusoidal";  // a family's own, which the settings leave
    train::attention_from_model(back, a);
    CHECK(back.positions == (a.rope_base > 0 || a.rel_buckets > 0 ? c.positions : "sinusoidal"));
    if (back.positions == "relative") CHECK(back.rel_max_distance == 20);
    if (back.positions == "rope") CHECK(back.rope_base == 500);
  }
}
