#include "models/encoder_only.h"

#include <cmath>

#include "nn/init.h"

namespace qkv::nn {

// ---- Encoder-only model --------------------------------------------------------------------
EncoderOnlyModel::EncoderOnlyModel(int64_t vocab, int64_t n_classes, int64_t n_layers,
                                   const LayerOptions& o, uint64_t seed)
    : init_gen(seed), dropout_gen(dropout_seed(seed)), d_model(o.d_model) {
  embed = register_module("embed", std::make_shared<Embedding>(vocab, o.d_model, init_gen));
  embed->weight.data().copy_(
      xavier_uniform({vocab, o.d_model}, init_gen));  // as Seq2SeqTransformer
  pos = std::make_shared<SinusoidalPositionalEncoding>(o.d_model);
  drop = register_module("drop", std::make_shared<Dropout>(o.dropout, dropout_gen));
  encoder =
      register_module("encoder", std::make_shared<Encoder>(n_layers, o, init_gen, dropout_gen));
  head = register_module("head", std::make_shared<Linear>(o.d_model, n_classes, true, init_gen));
}

Var EncoderOnlyModel::forward(const Tokens& t) {
  ModuleScope scope(this);
  t.check("EncoderOnlyModel::forward");
  Var x = embed->forward(t.ids, {t.batch, t.len}, std::sqrt(static_cast<real>(d_model)));
  x = drop->forward(pos->forward(x));
  return head->forward(encoder->forward(x, AttentionMask::padding(t.lengths)));
}

}  // namespace qkv::nn
