// The encoder-decoder of the paper (models/encoder_decoder.h) as the training
// program knows it: --model seq2seq. Its entry in the family table (trainer/family.h).
#include <algorithm>

#include "models/encoder_decoder.h"
#include "trainer/family.h"

namespace qkv::train {

namespace {

std::unique_ptr<nn::Model> build(const TrainConfig& c, const DataShape& d) {
  const int64_t V = d.vocab;
  nn::TransformerConfig m;
  m.src_vocab = m.tgt_vocab = V;
  shared_arch_fields(c, m, [](const auto& mine, auto& theirs) { theirs = mine; });
  m.encoder_layers = m.decoder_layers = c.layers;
  m.activation = activation_of(c);
  m.learned_positions = c.positions == "learned";
  m.max_positions = m.learned_positions ? c.context : 512;  // sinusoidal tables grow on demand
  m.seed = c.seed;
  attention_to_model(c, m);
  return std::make_unique<nn::Seq2SeqTransformer>(m);
}

void from_model(TrainConfig& c, const json& mc, const std::string& where) {
  const nn::TransformerConfig m = nn::transformer_config_from_json(mc, where);
  if (m.encoder_layers != m.decoder_layers)
    throw Error(where + ": encoder_layers " + std::to_string(m.encoder_layers) +
                " != decoder_layers " + std::to_string(m.decoder_layers) +
                " (the trainer's --layers sets both)");
  if (m.src_vocab != m.tgt_vocab)
    throw Error(where + ": src_vocab " + std::to_string(m.src_vocab) + " != tgt_vocab " +
                std::to_string(m.tgt_vocab) + " (the trainer's models share one vocabulary)");
  c.model = "seq2seq";
  shared_arch_fields(c, m, [](auto& mine, const auto& theirs) { mine = theirs; });
  c.layers = m.encoder_layers;
  c.positions = m.learned_positions ? "learned" : "sinusoidal";
  c.activation = nn::activation_name(m.activation);
  attention_from_model(c, m);
}

void check(const TrainConfig& c, const Require& require) {
  require(c.positions != "rope", "positions",
          "the seq2seq model adds sinusoidal or learned positions to its embeddings; rotary "
          "positions (rope) are the gpt model's");
}

}  // namespace

extern const Family kSeq2SeqFamily = {
    "seq2seq",
    "seq2seq",
    nullptr,  // the paper's defaults are TrainConfig's
    check,    // sinusoidal or learned positions, tied or not
    build,
    from_model,
    "src_vocab",
    [](const TrainConfig& c) { return c.positions == "learned"; },
    // The encoder reads the source (n); the decoder <s> and the target (m + 1).
    [](int64_t n, int64_t m) { return std::max(n, m + 1); },
    2.5,  // an encoder and a decoder (with cross-attention)
    false,
    false,
    false,
    "",
    [](const TrainConfig& c) { return std::to_string(c.layers) + "+" + std::to_string(c.layers); },
    [](const std::string& src, const std::string& answer) {
      return "answers \"" + src + "\" with \"" + answer +
             "\" (greedy), scored with cross-entropy on its own answer and </s>";
    },
    nullptr,
    // The decoder reads <s> target (T = tgt + 1) over the source (S = src);
    // per layer: encoder self- (S, S), decoder self- (T, T) and cross (T, S).
    [](int64_t src, int64_t tgt) {
      return std::pair<int64_t, int64_t>{tgt + 1, src};
    },
    [](double T, double S) { return S * S + T * T + T * S; },
    nullptr,  // token families: no shape beyond the vocabulary
    false,
    nullptr,
    nullptr,
    "",
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace qkv::train
