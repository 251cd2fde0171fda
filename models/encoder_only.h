// An encoder-only token model (one label per input token), made of the encoder
// stack of models/encoder_decoder.h.
#pragma once
#include <memory>

#include "models/encoder_decoder.h"

namespace qkv::nn {

// Encoder-only model: embeddings, sinusoidal positions, an encoder stack and a
// per-token classifier head (e.g. tagging each input token).
class EncoderOnlyModel : public Module {
 public:
  EncoderOnlyModel(int64_t vocab, int64_t n_classes, int64_t n_layers, const LayerOptions& o,
                   uint64_t seed = 0);
  Var forward(const Tokens& ids);  // -> logits (B,T,n_classes)
  Generator init_gen, dropout_gen;
  int64_t d_model;
  std::shared_ptr<Embedding> embed;
  std::shared_ptr<SinusoidalPositionalEncoding> pos;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Encoder> encoder;
  std::shared_ptr<Linear> head;
};

}  // namespace qkv::nn
