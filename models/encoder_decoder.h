// The encoder-decoder Transformer of "Attention Is All You Need" (figure 1),
// read top to bottom in the order of the paper: the layer options, the
// encoder layer and the decoder layer (each sublayer wrapped in residual +
// LayerNorm, section 3.1, nn/sublayer.h), the N-layer stacks, then the whole
// model: embeddings and positions (3.4, 3.5), encoder, decoder, output layer (lm_head).
// The decoder-only (models/gpt.h) and encoder-only (models/encoder_only.h) models are
// made of the same layers.
#pragma once
#include <memory>
#include <vector>

#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/feedforward.h"
#include "nn/ffn.h"
#include "nn/moe.h"
#include "nn/layernorm.h"
#include "nn/norm.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/positional.h"
#include "nn/tokens.h"
#include "models/model.h"

namespace qkv::nn {

// What a layer recomputes in backward instead of keeping (autograd/recompute.h):
// nothing; the feed-forward network's hidden activations; the whole layer.
enum class Recompute { None, FFN, Layer };

// The attention settings every model config holds beside its sizes: the
// kernel and its pattern change the function (sparse, linear) or only how it
// is computed (memory-efficient, auto); scaled = false drops 1/sqrt(d_k);
// d_k sets the query/key head size apart from d_model / heads (Table 3 row B:
// W_Q, W_K become (heads*d_k, d_model), values keep d_model / heads);
// recompute and the memory budget trade time for memory, never the numbers.
struct AttentionSettings {
  AttentionKernel attention = AttentionKernel::Standard;
  int64_t d_k = 0;                          // 0: d_model / heads
  int64_t window = 128, global_every = 64;  // the sparse pattern
  bool scaled = true;
  Recompute recompute = Recompute::None;
  int64_t attention_memory_budget = 0;  // bytes; 0: no limit
  // The kind of every norm (nn/norm.h's table): model_config key "norm",
  // "layer" in every file written before the key.
  std::string norm = "layer";
  // Grouped-query attention (kv_heads key/value heads shared by groups of
  // heads / kv_heads query heads; 0: heads) and rotary positions (rope_base
  // > 0, 10000 usual; 0: none), in every self-attention of the model. Rotary
  // positions are a GPT's alone: the other models refuse rope_base > 0.
  int64_t kv_heads = 0;
  real rope_base = 0;
  // false: the attentions' W_Q, W_K, W_V, W_O and the FFN's linear maps have
  // no bias (model_config key "bias"; the norms keep theirs).
  bool bias = true;
  // T5's relative position bias (nn/relative_bias.h; model_config keys
  // "rel_buckets", "rel_max_distance", written only when rel_buckets > 0):
  // each stack holds one learned table (heads, rel_buckets), `rel_bias`,
  // shared by its layers' self-attentions (an encoder's bidirectional, a
  // decoder's and a GPT's causal; cross-attention none), and the model has
  // no absolute positions. 0 buckets: none (every file written before).
  int64_t rel_buckets = 0, rel_max_distance = 128;
  bool relative() const { return rel_buckets > 0; }
  // A mixture of experts in every layer's FFN (nn/moe.h; model_config keys
  // experts, experts_per_token, capacity_factor, aux_loss, written only when
  // experts > 0); experts 0, as in every file before the keys: dense.
  MoESettings moe;
};

// What one layer is built from: its sizes, activation and norm placement,
// and the attention settings of its model (AttentionSettings above, held
// whole: a new setting is a field there, not a copy here).
struct LayerOptions {
  int64_t d_model = 512, heads = 8, d_ff = 2048;
  real dropout = 0.1;
  // The feed-forward block (nn/ffn.h): FeedForward with ReLU or GELU, or
  // SwiGLU of hidden width swiglu_hidden(d_ff).
  Activation activation = Activation::ReLU;
  bool pre_norm = false;  // false: Post-LN as in the paper; true: Pre-LN
  // The self-attention's heads' kernel (nn/attention.h) and its settings,
  // the norm's kind, biases, key/value heads, rotary and relative
  // positions, a mixture of experts. Cross-attention runs the kernel too
  // when it is MemoryEfficient or Auto (the same maths); Sparse and Linear
  // apply to self-attention only, as do kv_heads, rope_base and the
  // relative bias (cross-attention keeps every head and no position).
  AttentionSettings attn;
};

// Encoder layer: self-attention, then the feed-forward network.
//   Post-LN: x = norm1(x + drop(self_attn(x)));  x = norm2(x + drop(ffn(x)))
//   Pre-LN:  x = x + drop(self_attn(norm1(x)));  x = x + drop(ffn(norm2(x)))
class EncoderLayer : public Module {
 public:
  EncoderLayer(const LayerOptions& o, Generator& init, Generator& dropout);
  Var forward(const Var& x, const AttentionMask& self_mask);
  std::shared_ptr<MultiHeadAttention> self_attn;
  std::shared_ptr<Norm> norm1, norm2;
  std::shared_ptr<FFN> ffn;  // FeedForward or SwiGLU (nn/ffn.h)
  std::shared_ptr<Dropout> drop1, drop2;
  bool pre_norm;
  Recompute recompute;

 private:
  Generator* dropout_gen_;  // the dropouts' generator, replayed by Recompute::Layer
};

// Decoder layer: masked self-attention, cross-attention over the encoder's
// output (memory), then the feed-forward network; each wrapped as above.
class DecoderLayer : public Module {
 public:
  DecoderLayer(const LayerOptions& o, Generator& init, Generator& dropout);
  Var forward(const Var& y, const Var& memory, const AttentionMask& self_mask,
              const AttentionMask& cross_mask);
  std::shared_ptr<MultiHeadAttention> self_attn, cross_attn;
  std::shared_ptr<Norm> norm1, norm2, norm3;
  std::shared_ptr<FFN> ffn;  // FeedForward or SwiGLU (nn/ffn.h)
  std::shared_ptr<Dropout> drop1, drop2, drop3;
  bool pre_norm;
  Recompute recompute;

 private:
  Generator* dropout_gen_;  // the dropouts' generator, replayed by Recompute::Layer
};

// T5's relative bias table (heads, rel_buckets), N(0, 1/D) as T5 initialises
// it, shared by the self-attentions `attns` (bidirectional or causal
// buckets); undefined when o.rel_buckets is 0. The caller registers it.
Tensor relative_bias_init(const LayerOptions& o, bool bidirectional, Generator& init);
void share_relative_bias(const Var& table, const LayerOptions& o, bool bidirectional,
                         const std::vector<MultiHeadAttention*>& attns);

// N encoder layers; Pre-LN adds the final LayerNorm `norm` it needs. With
// relative positions, the table rel_bias (bidirectional) all layers share.
class Encoder : public Module {
 public:
  Encoder(int64_t n_layers, const LayerOptions& o, Generator& init, Generator& dropout);
  Var forward(const Var& x, const AttentionMask& mask);
  std::vector<std::shared_ptr<EncoderLayer>> layers;
  std::shared_ptr<Norm> norm;  // null for Post-LN
  Var rel_bias;                // (heads, rel_buckets), or undefined
};

class Decoder : public Module {
 public:
  Decoder(int64_t n_layers, const LayerOptions& o, Generator& init, Generator& dropout);
  Var forward(const Var& y, const Var& memory, const AttentionMask& self_mask,
              const AttentionMask& cross_mask);
  std::vector<std::shared_ptr<DecoderLayer>> layers;
  std::shared_ptr<Norm> norm;  // null for Post-LN
  Var rel_bias;                // (heads, rel_buckets) causal, self-attention only; or undefined
};

// The layer options of any model config (its sizes, activation, norm
// placement and attention settings): every family builds its layers from it.
template <class Config>
LayerOptions layer_options(const Config& c) {
  LayerOptions o;
  o.d_model = c.d_model;
  o.heads = c.heads;
  o.d_ff = c.d_ff;
  o.dropout = c.dropout;
  o.activation = c.activation;
  o.pre_norm = c.pre_norm;
  o.attn = c;  // the config's AttentionSettings
  return o;
}

struct TransformerConfig : AttentionSettings {
  int64_t src_vocab = 16, tgt_vocab = 16;
  int64_t d_model = 512, heads = 8, encoder_layers = 6, decoder_layers = 6, d_ff = 2048;
  real dropout = 0.1;
  Activation activation = Activation::ReLU;
  bool pre_norm = false;
  bool tie_weights = false;        // output projection reuses tgt_embed.weight
  bool learned_positions = false;  // else sinusoidal
  int64_t max_positions = 512;     // rows of the position table (learned: the longest
                                   // sequence read; sinusoidal: grows on demand)
  uint64_t seed = 0;               // initialisation and dropout streams
  LayerOptions layer() const { return layer_options(*this); }
};

// The encoder-decoder model (figure 1 of the paper).
class Seq2SeqTransformer : public Model {
 public:
  explicit Seq2SeqTransformer(const TransformerConfig& cfg);
  // src (B,S) -> memory (B,S,D)
  Var encode(const Tokens& src);
  // tgt (B,T), memory (B,S,D) -> logits (B,T,V_tgt). src gives the source lengths.
  Var decode(const Tokens& tgt, const Var& memory, const Tokens& src);
  Var forward(const Tokens& src, const Tokens& tgt) { return decode(tgt, encode(src), src); }
  // Cross-attention probabilities of every decoder layer from the last decode
  // (B,H,T,S each), when keep_attention(true) was set.
  void keep_attention(bool on);
  std::vector<Tensor> cross_attention() const;

  // The Model interface (models/model.h).
  const char* kind() const override { return "seq2seq"; }
  int64_t vocab_size() const override { return cfg.tgt_vocab; }
  int64_t max_positions() const override {
    return cfg.learned_positions && !cfg.relative() ? cfg.max_positions : 0;
  }
  TeacherForced forward_pairs(const std::vector<data::Pair>& pairs) override;
  std::vector<Tensor> source_attention(const data::Seq& src, const data::Seq& tgt) override;
  Generator& dropout_generator() override { return dropout_gen; }

  TransformerConfig cfg;
  Generator init_gen, dropout_gen;
  std::shared_ptr<Embedding> src_embed, tgt_embed;
  std::shared_ptr<SinusoidalPositionalEncoding> sin_pos;
  std::shared_ptr<LearnedPositionalEmbedding> src_pos, tgt_pos;
  std::shared_ptr<Dropout> src_drop, tgt_drop;
  std::shared_ptr<Encoder> encoder;
  std::shared_ptr<Decoder> decoder;
  // The output layer (D -> V), named lm_head as in the GPT (the paper's
  // "generator"; files written before the rename load: checkpoint/checkpoint.h).
  std::shared_ptr<Linear> lm_head;  // weight absent (bias only) when tied

 private:
  Var embed(const Tokens& t, Embedding& emb, LearnedPositionalEmbedding* pos, Dropout& drop);
};

}  // namespace qkv::nn
