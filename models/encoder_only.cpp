#include "models/encoder_only.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "nn/init.h"

namespace qkv::nn {

// ---- Encoder-only model --------------------------------------------------------------------
EncoderOnlyModel::EncoderOnlyModel(const EncoderOnlyConfig& c)
    : cfg(c), init_gen(c.seed), dropout_gen(dropout_seed(c.seed)) {
  if (c.vocab < 1 || c.classes < 1)
    throw Error("EncoderOnlyModel: vocab and classes must be positive, got " +
                std::to_string(c.vocab) + " and " + std::to_string(c.classes));
  if (c.rope_base != 0)
    throw Error(
        "EncoderOnlyModel: rope_base is set, but rotary positions are a GPT's: this "
        "model adds sinusoidal positions or T5's relative bias (leave rope_base 0)");
  const LayerOptions o = c.layer();
  embed = register_module("embed", std::make_shared<Embedding>(c.vocab, c.d_model, init_gen));
  embed->weight.data().copy_(
      xavier_uniform({c.vocab, c.d_model}, init_gen));  // as Seq2SeqTransformer
  // relative positions (T5): the encoder's bias table instead of sinusoids
  if (!c.relative()) pos = std::make_shared<SinusoidalPositionalEncoding>(c.d_model);
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout, dropout_gen));
  encoder =
      register_module("encoder", std::make_shared<Encoder>(c.layers, o, init_gen, dropout_gen));
  head = register_module("head", std::make_shared<Linear>(c.d_model, c.classes, true, init_gen));
}

Var EncoderOnlyModel::forward(const Tokens& t) {
  ModuleScope scope(this);
  t.check("EncoderOnlyModel::forward");
  Var x = embed->forward(t.ids, {t.batch, t.len}, std::sqrt(static_cast<real>(cfg.d_model)));
  x = drop->forward(pos ? pos->forward(x) : x);
  return head->forward(encoder->forward(x, AttentionMask::padding(t.lengths)));
}

// Source (B, S) -> logits (B, S, classes), each scored against its label.
TeacherForced EncoderOnlyModel::forward_pairs(const std::vector<data::Pair>& pairs) {
  const int64_t B = static_cast<int64_t>(pairs.size());
  int64_t S = 0;
  for (const data::Pair& p : pairs) {
    if (p.src.size() != p.tgt.size())
      throw Error("EncoderOnlyModel: a source of " + std::to_string(p.src.size()) + " tokens has " +
                  std::to_string(p.tgt.size()) + " labels (one label per source token)");
    S = std::max<int64_t>(S, static_cast<int64_t>(p.src.size()));
  }
  Tokens src{std::vector<int64_t>(B * S, data::kPad), B, S, std::vector<int64_t>(B)};
  TeacherForced out;
  out.targets.assign(B * S, data::kPad);
  for (int64_t i = 0; i < B; ++i) {
    const data::Pair& p = pairs[i];
    std::copy(p.src.begin(), p.src.end(), src.ids.begin() + i * S);
    std::copy(p.tgt.begin(), p.tgt.end(), out.targets.begin() + i * S);
    src.lengths[i] = static_cast<int64_t>(p.src.size());
    out.target_tokens += static_cast<int64_t>(p.tgt.size());
  }
  out.logits = forward(src);
  return out;
}

}  // namespace qkv::nn
