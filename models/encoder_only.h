// An encoder-only token model (one label per input token), made of the encoder
// stack of models/encoder_decoder.h.
#pragma once
#include <memory>

#include "models/encoder_decoder.h"
#include "models/model.h"

namespace qkv::nn {

struct EncoderOnlyConfig : AttentionSettings {
  int64_t vocab = 16;    // input tokens
  int64_t classes = 16;  // labels, one per input token
  int64_t d_model = 512, heads = 8, layers = 6, d_ff = 2048;
  real dropout = 0.1;
  Activation activation = Activation::ReLU;
  bool pre_norm = false;
  uint64_t seed = 0;  // initialisation and dropout streams
  LayerOptions layer() const { return layer_options(*this); }
};

// Encoder-only model: embeddings, sinusoidal positions, an encoder stack and a
// per-token classifier head (e.g. tagging each input token).
class EncoderOnlyModel : public Model {
 public:
  explicit EncoderOnlyModel(const EncoderOnlyConfig& cfg);
  Var forward(const Tokens& ids);  // -> logits (B,T,classes)

  // The Model interface (models/model.h): a pair is a source and its labels,
  // one per source token.
  const char* kind() const override { return "encoder"; }
  int64_t vocab_size() const override { return cfg.classes; }
  int64_t max_positions() const override { return 0; }
  int64_t positions_to_answer(int64_t n, int64_t) const override { return n; }
  TeacherForced forward_pairs(const std::vector<data::Pair>& pairs) override;
  Generator& dropout_generator() override { return dropout_gen; }

  EncoderOnlyConfig cfg;
  Generator init_gen, dropout_gen;
  std::shared_ptr<Embedding> embed;
  std::shared_ptr<SinusoidalPositionalEncoding> pos;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Encoder> encoder;
  std::shared_ptr<Linear> head;
};

}  // namespace qkv::nn
