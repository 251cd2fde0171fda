#include "models/gpt.h"

#include <string>

#include "autograd/ops.h"
#include "core/error.h"
#include "nn/init.h"

namespace qkv::nn {

// ---- Decoder-only language model --------------------------------------------------------
GPT::GPT(const GPTConfig& c) : cfg(c), init_gen(c.seed), dropout_gen(dropout_seed(c.seed)) {
  const LayerOptions o = layer_options(c);
  tok_embed =
      register_module("tok_embed", std::make_shared<Embedding>(c.vocab, c.d_model, init_gen));
  // Rotary positions (rope_base > 0) rotate queries and keys inside
  // attention instead: no position table then.
  if (c.rope_base == 0 && !c.relative())
    pos_embed = register_module("pos_embed", std::make_shared<LearnedPositionalEmbedding>(
                                                 c.max_positions, c.d_model, init_gen));
  // GPT-2's initialisation: N(0, 0.02) for token and position tables (with a
  // tied head, N(0,1) rows would start the logits at the scale of D).
  tok_embed->weight.data().copy_(normal_init({c.vocab, c.d_model}, real(0.02), init_gen));
  if (pos_embed)
    pos_embed->weight.data().copy_(normal_init({c.max_positions, c.d_model}, real(0.02), init_gen));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout, dropout_gen));
  for (int64_t i = 0; i < c.layers; ++i)
    layers.push_back(register_module("layers." + std::to_string(i),
                                     std::make_shared<EncoderLayer>(o, init_gen, dropout_gen)));
  if (c.pre_norm) norm = register_module("norm", make_norm(c.norm, c.d_model));
  // T5's relative positions: one causal table all layers share, in place of pos_embed
  if (c.relative()) {
    rel_bias = register_parameter("rel_bias", relative_bias_init(o, false, init_gen));
    std::vector<MultiHeadAttention*> attns;
    for (auto& l : layers) attns.push_back(l->self_attn.get());
    share_relative_bias(rel_bias, o, false, attns);
  }
  if (!c.tie_weights)
    lm_head =
        register_module("lm_head", std::make_shared<Linear>(c.d_model, c.vocab, false, init_gen));
}

Var GPT::forward(const Tokens& t) {
  ModuleScope scope(this);
  t.check("GPT::forward");
  // (B,T) -> (B,T,D): token + learned position embeddings (no sqrt(D) scaling);
  // with RoPE the tokens alone, their positions rotated into Q and K.
  if (!pos_embed && t.len > cfg.max_positions)
    throw Error("GPT::forward: sequence length T = " + std::to_string(t.len) +
                " exceeds max_positions = " + std::to_string(cfg.max_positions));
  Var x = tok_embed->forward(t.ids, {t.batch, t.len});
  if (pos_embed) x = pos_embed->forward(x);
  x = drop->forward(x);
  const AttentionMask mask = AttentionMask::causal_padding(t.lengths);
  for (auto& layer : layers) x = layer->forward(x, mask);
  if (norm) x = norm->forward(x);
  return linear(x, lm_head ? lm_head->weight : tok_embed->weight);  // (B,T,V)
}

// A pair is one sequence "source <s> target </s>" scored on the target (data::collate_prompted).
TeacherForced GPT::forward_pairs(const std::vector<data::Pair>& pairs) {
  return forward_text(data::collate_prompted(pairs));
}

TeacherForced GPT::forward_text(const data::LMBatch& b) {
  return {forward(b.ids), b.targets, b.target_tokens};
}

}  // namespace qkv::nn
