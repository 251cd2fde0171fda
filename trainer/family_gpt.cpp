// The decoder-only language model (models/gpt.h) as the training program
// knows it: --model gpt. Its entry in the family table (trainer/family.h).
#include "generation/sampling.h"
#include "models/gpt.h"
#include "trainer/family.h"

namespace qkv::train {

namespace {

// The decoder-only model's own defaults (Pre-LN, GELU, tied output; learned
// positions, the first of its row's) for whatever the command line left unsaid.
void defaults(TrainConfig& c, const std::function<bool(const char*)>& said) {
  if (!said("pre_ln")) c.pre_ln = true;
  if (!said("activation")) c.activation = "gelu";
  if (!said("tie")) c.tie = true;
}

std::unique_ptr<nn::Model> build(const TrainConfig& c, const DataShape& d) {
  const int64_t V = d.vocab;
  nn::GPTConfig g;
  g.vocab = V;
  shared_arch_fields(c, g, [](const auto& mine, auto& theirs) { theirs = mine; });
  g.layers = c.layers;
  g.max_positions = c.context;
  g.activation = activation_of(c);
  g.seed = c.seed;
  attention_to_model(c, g);
  return std::make_unique<nn::GPT>(g);
}

void from_model(TrainConfig& c, const json& mc, const std::string& where) {
  const nn::GPTConfig g = nn::gpt_config_from_json(mc, where);
  c.model = "gpt";
  shared_arch_fields(c, g, [](auto& mine, const auto& theirs) { mine = theirs; });
  c.layers = g.layers;
  c.activation = nn::activation_name(g.activation);
  attention_from_model(c, g);
}

data::Seq sample(nn::Model& m, const data::Seq& window, const nn::SampleOptions& o,
                 Generator& gen) {
  return nn::generate(dynamic_cast<nn::GPT&>(m), data::right_padded({window}), o, gen).front();
}

}  // namespace

Family gpt_family() {
  Family f;
  f.name = "gpt";
  f.help = "gpt (decoder-only)";
  f.settings.defaults = defaults;
  f.model.build = build;
  f.model.from_model = from_model;
  f.model.vocab_key = "vocab";
  f.model.positions = "learned rope relative";
  f.model.positions_refused =
      "the gpt model has a learned position table, rotary positions (rope) or T5's relative "
      "bias (relative)";
  // A learned position table, or with RoPE max_positions all the same.
  f.model.fixed_positions = [](const TrainConfig&) { return true; };
  f.reads.text = true;
  f.reads.one_sequence = true;
  // One sequence "source <s> target" (the last target token is never read).
  f.reads.sequence_tokens = [](int64_t n, int64_t m) { return n + m + 1; };
  f.answers.sample = sample;
  f.reports.explain_what = [](const std::string& src, const std::string& answer) {
    return "answers \"" + src + "\" with \"" + answer +
           "\" (greedy), scored with cross-entropy on its own answer and </s>";
  };
  // One sequence "source <s> target </s>": T = S = src + tgt + 2.
  f.reports.attention_lengths = [](int64_t src, int64_t tgt) {
    return std::pair<int64_t, int64_t>{src + tgt + 2, src + tgt + 2};
  };
  f.objectives.names = "lm";
  return f;
}

}  // namespace qkv::train
