// The encoder-only token model (models/encoder_only.h) as the training
// program knows it: --model encoder. Its entry in the family table (trainer/family.h).
#include "models/encoder_only.h"
#include "trainer/family.h"

namespace qkv::train {

namespace {

void check(const TrainConfig& c, const Require& require) {
  require(!c.tie, "tie",
          "the encoder model's output layer gives labels: it has no embedding to tie to");
}

// One vocabulary: the labels are tokens of the data too.
std::unique_ptr<nn::Model> build(const TrainConfig& c, const DataShape& d) {
  const int64_t V = d.vocab;
  nn::EncoderOnlyConfig e;
  e.vocab = e.classes = V;
  shared_arch_fields(c, e, [](const auto& mine, auto& theirs) { theirs = mine; });
  e.layers = c.layers;
  e.activation = activation_of(c);
  e.seed = c.seed;
  attention_to_model(c, e);
  return std::make_unique<nn::EncoderOnlyModel>(e);
}

void from_model(TrainConfig& c, const json& mc, const std::string& where) {
  const nn::EncoderOnlyConfig e = nn::encoder_config_from_json(mc, where);
  if (e.vocab != e.classes)
    throw Error(where + ": vocab " + std::to_string(e.vocab) + " != classes " +
                std::to_string(e.classes) + " (the trainer's models share one vocabulary)");
  c.model = "encoder";
  shared_arch_fields(c, e, [](auto& mine, const auto& theirs) { mine = theirs; });
  c.layers = e.layers;
  c.tie = false;
  c.activation = nn::activation_name(e.activation);
  attention_from_model(c, e);
}

}  // namespace

Family encoder_family() {
  Family f;
  f.name = "encoder";
  f.help = "encoder";
  f.settings.check = check;
  f.model.build = build;
  f.model.from_model = from_model;
  f.model.vocab_key = "vocab";
  f.model.positions = "sinusoidal relative";
  f.model.positions_refused =
      "the encoder model (nn::EncoderOnlyModel) has sinusoidal positions or T5's relative bias "
      "(relative)";
  // Sinusoidal positions, computed as needed: no fixed table.
  f.reads.labels_tokens = true;
  // The source alone: every task's answer has its source's length.
  f.reads.sequence_tokens = [](int64_t n, int64_t) { return n; };
  f.answers.no_beam =
      "the encoder model (--model encoder) gives every source token its label at once; there is "
      "no sequence to search (it answers with the likeliest labels)";
  f.reports.explain_what = [](const std::string& src, const std::string& answer) {
    return "labels \"" + src + "\" with \"" + answer +
           "\" (the likeliest label of each token), scored with cross-entropy on its own labels";
  };
  // The source alone: T = S = src.
  f.reports.attention_lengths = [](int64_t src, int64_t) {
    return std::pair<int64_t, int64_t>{src, src};
  };
  return f;
}

}  // namespace qkv::train
