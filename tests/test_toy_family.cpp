// A model family added from outside the library (tests/toy_family.h: its own
// file, no line of the library changed) trains through the trainer's code
// path, evaluates, answers, and saves and loads as a checkpoint and as a
// model file: the registration shape of trainer/family.h holds.
#include <doctest/doctest.h>

#include <string>

#include "temp_dir.h"
#include "test_seed.h"
#include "toy_family.h"
#include "trainer/trainer.h"

using namespace qkv;
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
