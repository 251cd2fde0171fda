// A decoder-only (GPT-style) causal language model, made of the encoder layers
// of models/encoder_decoder.h run under a causal mask.
#pragma once
#include <memory>
#include <vector>

#include "models/encoder_decoder.h"
#include "models/model.h"

namespace qkv::nn {

struct GPTConfig : AttentionSettings {
  int64_t vocab = 512, d_model = 128, heads = 4, layers = 2, d_ff = 512;
  int64_t max_positions = 64;  // rows of the position table: the longest sequence read
  real dropout = 0.0;
  Activation activation = Activation::GELU;
  bool pre_norm = true;
  bool tie_weights = true;  // lm_head uses tok_embed.weight (no lm_head bias)
  uint64_t seed = 0;
};

// Decoder-only causal language model: token + learned position embeddings,
// layers of masked self-attention + FFN (encoder layers with a causal mask),
// a final LayerNorm (Pre-LN), and the LM head.
class GPT : public Model {
 public:
  explicit GPT(const GPTConfig& cfg);
  Var forward(const Tokens& ids);  // -> logits (B,T,V)

  // The Model interface (models/model.h).
  const char* kind() const override { return "gpt"; }
  int64_t vocab_size() const override { return cfg.vocab; }
  int64_t max_positions() const override { return cfg.max_positions; }
  int64_t positions_to_answer(int64_t n, int64_t m) const override { return n + m; }
  TeacherForced forward_pairs(const std::vector<data::Pair>& pairs) override;
  bool reads_text() const override { return true; }
  TeacherForced forward_text(const data::LMBatch& b) override;
  Generator& dropout_generator() override { return dropout_gen; }

  GPTConfig cfg;
  Generator init_gen, dropout_gen;
  std::shared_ptr<Embedding> tok_embed;
  std::shared_ptr<LearnedPositionalEmbedding> pos_embed;  // null with RoPE or relative positions
  Var rel_bias;  // relative positions: (heads, rel_buckets), causal, shared by every layer
  std::shared_ptr<Dropout> drop;
  std::vector<std::shared_ptr<EncoderLayer>> layers;
  std::shared_ptr<Norm> norm;       // null for Post-LN
  std::shared_ptr<Linear> lm_head;  // null when tied
};

}  // namespace qkv::nn
