// Greedy decoding on a hand-set model, a short training run that must cut the
// loss, and resume-from-checkpoint equal to an uninterrupted run, bit for bit.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>

#include "examples/trainer.h"

using namespace qkv;
using namespace qkv::nn;

namespace {

// A Pre-LN model whose attention and FFN outputs are zeroed, so the decoder
// output is LayerNorm(embedding of the current token + position). Embedding
// rows are large one-hots, so the normalised vector points at the current
// token; the output weight then maps token k to next[k]: greedy decoding must
// walk that chain from <bos> until <eos>.
void hand_set(Seq2SeqTransformer& m, const std::vector<int64_t>& next) {
  NoGradGuard ng;
  for (auto& [name, v] : m.named_parameters()) {
    const bool zero = name.find("w_o") != std::string::npos || name.find("linear2") != std::string::npos;
    if (zero) v.data().zero_();
  }
  Tensor& E = m.tgt_embed->weight.data();  // (V, D)
  E.zero_();
  const int64_t V = E.size(0);
  for (int64_t k = 0; k < V; ++k) E.at({k, k}) = 50;
  Tensor& W = m.generator->weight.data();  // (V, D)
  W.zero_();
  m.generator->bias.data().zero_();
  for (int64_t k = 0; k < V; ++k)
    if (next[k] >= 0) W.at({next[k], k}) = 10;
}

TransformerConfig tiny(int64_t V) {
  TransformerConfig c;
  c.src_vocab = c.tgt_vocab = V;
  c.d_model = 8; c.heads = 2; c.encoder_layers = c.decoder_layers = 1; c.d_ff = 8;
  c.dropout = 0; c.pre_norm = true; c.seed = 11;
  return c;
}

}  // namespace

TEST_CASE("greedy_decode follows a hand-set model from <bos> to <eos> and respects the length cap") {
  Seq2SeqTransformer m(tiny(6));
  // <bos>=1 -> 3 -> 4 -> 5 -> <eos>=2
  hand_set(m, {-1, 3, -1, 4, 5, 2});
  m.eval();
  Tokens src{{3, 4, 5, 5, 0, 0}, 2, 3, {3, 1}};
  DecodeOptions o;
  o.max_len = 10;
  auto out = greedy_decode(m, src, o);
  REQUIRE(out.size() == 2);
  CHECK(out[0] == std::vector<int64_t>{3, 4, 5});
  CHECK(out[1] == std::vector<int64_t>{3, 4, 5});
  o.max_len = 2;  // capped before <eos>
  CHECK(greedy_decode(m, src, o)[0] == std::vector<int64_t>{3, 4});
  // <bos> -> <eos> at once: empty output
  hand_set(m, {-1, 2, -1, 4, 5, 2});
  o.max_len = 10;
  CHECK(greedy_decode(m, src, o)[0].empty());
  o.max_len = 0;
  CHECK_THROWS_AS(greedy_decode(m, src, o), Error);
}

namespace {
train::TrainConfig small_config() {
  train::TrainConfig c;
  c.task = {tasks::Task::Reverse, 6, 2, 5};
  c.d_model = 16; c.heads = 2; c.layers = 1; c.d_ff = 32;
  c.batch = 32; c.steps = 300; c.warmup = 20; c.lr = 3e-3; c.heldout = 50;
  c.seed = 4;
  return c;
}

std::vector<Tensor> snapshot(const Module& m) {
  std::vector<Tensor> out;
  for (auto& [n, v] : m.named_parameters()) out.push_back(v.data().clone());
  return out;
}
}  // namespace

TEST_CASE("training a tiny model on reverse for 300 steps cuts the loss by more than half") {
  train::Trainer t(small_config());
  double first = 0, last = 0;
  for (int i = 0; i < 20; ++i) first += t.step();
  for (int i = 20; i < 280; ++i) t.step();
  for (int i = 280; i < 300; ++i) last += t.step();
  INFO("mean loss first 20 steps " << first / 20 << ", last 20 steps " << last / 20);
  CHECK(last < 0.5 * first);
}

TEST_CASE("saving at step k and resuming gives bit-identical parameters at step n") {
  train::TrainConfig c = small_config();
  c.dropout = 0.1;  // the dropout stream must resume too
  c.steps = 20;
  const std::string path = (std::filesystem::temp_directory_path() / "qkv_resume_test.safetensors").string();

  train::Trainer straight(c);
  for (int i = 0; i < 20; ++i) straight.step();

  {
    train::Trainer first(c);
    for (int i = 0; i < 8; ++i) first.step();
    first.save(path);
  }
  train::Trainer resumed(c);
  resumed.load(path);
  CHECK(resumed.step_count() == 8);
  for (int i = 8; i < 20; ++i) resumed.step();

  const auto a = snapshot(straight.model), b = snapshot(resumed.model);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << i);
    CHECK(max_abs_diff(a[i], b[i]) == 0);
  }
  std::remove(path.c_str());
}

TEST_CASE("a checkpoint whose config does not match the run is a clear error") {
  train::TrainConfig c = small_config();
  const std::string path = (std::filesystem::temp_directory_path() / "qkv_mismatch_test.safetensors").string();
  {
    train::Trainer t(c);
    t.save(path);
  }
  c.d_model = 32;
  train::Trainer other(c);
  CHECK_THROWS_WITH_AS(other.load(path), doctest::Contains("d_model = 16 but this run has d_model = 32"), Error);
  std::remove(path.c_str());
}

TEST_CASE("a file that is not a training checkpoint, and an unknown schedule, are clear errors") {
  train::TrainConfig c = small_config();
  const std::string path = (std::filesystem::temp_directory_path() / "qkv_not_a_ckpt.safetensors").string();
  {
    train::Trainer t(c);
    nn::save(t.model, path);  // a model-only file: no training metadata
    CHECK_THROWS_WITH_AS(t.load(path), doctest::Contains("not a qkv training checkpoint"), Error);
  }
  std::remove(path.c_str());
  c.schedule = "linear";
  CHECK_THROWS_WITH_AS(train::Trainer{c}, doctest::Contains("unknown schedule 'linear'"), Error);
}
