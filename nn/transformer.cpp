#include "nn/transformer.h"

#include <cmath>
#include <string>

#include "autograd/ops.h"
#include "core/error.h"
#include "nn/init.h"

namespace qkv::nn {

// ---- Tokens ------------------------------------------------------------------
std::vector<int64_t> Tokens::full_lengths() const {
  return lengths.empty() ? std::vector<int64_t>(static_cast<size_t>(batch), len) : lengths;
}

void Tokens::check(const char* op) const {
  if (batch < 0 || len < 0 || static_cast<int64_t>(ids.size()) != batch * len)
    throw Error(std::string(op) + ": " + std::to_string(ids.size()) + " token ids for (B,T) = (" +
                std::to_string(batch) + "," + std::to_string(len) + ")");
  if (!lengths.empty()) {
    if (static_cast<int64_t>(lengths.size()) != batch)
      throw Error(std::string(op) + ": " + std::to_string(lengths.size()) +
                  " lengths for a batch of " + std::to_string(batch));
    for (int64_t b = 0; b < batch; ++b)
      if (lengths[b] < 0 || lengths[b] > len)
        throw Error(std::string(op) + ": length " + std::to_string(lengths[b]) + " of sequence " +
                    std::to_string(b) + " outside [0, " + std::to_string(len) + "]");
  }
}

namespace {
// Residual sublayer, both placements of LayerNorm (section 3.1; Pre-LN variant):
//   Post-LN: norm(x + drop(f(x)))      Pre-LN: x + drop(f(norm(x)))
template <class F>
Var sublayer(const Var& x, LayerNorm& norm, Dropout& drop, bool pre_norm, F f) {
  if (pre_norm) return x + drop.forward(f(norm.forward(x)));
  return norm.forward(x, drop.forward(f(x)));  // norm(x + ...), the sum fused into the norm
}
}  // namespace

// ---- Encoder layer -------------------------------------------------------------
EncoderLayer::EncoderLayer(const LayerOptions& o, Generator& init, Generator& dg)
    : pre_norm(o.pre_norm) {
  self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(o.d_model, o.heads, true, init));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(o.d_model));
  ffn = register_module("ffn", std::make_shared<FeedForward>(o.d_model, o.d_ff, o.activation, init));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(o.d_model));
  drop1 = register_module("drop1", std::make_shared<Dropout>(o.dropout, dg));
  drop2 = register_module("drop2", std::make_shared<Dropout>(o.dropout, dg));
}

Var EncoderLayer::forward(const Var& x, const AttentionMask& self_mask) {
  ModuleScope scope(this);
  // (B,S,D) -> (B,S,D)
  Var h = sublayer(x, *norm1, *drop1, pre_norm,
                   [&](const Var& v) { return self_attn->forward(v, v, self_mask); });
  return sublayer(h, *norm2, *drop2, pre_norm, [&](const Var& v) { return ffn->forward(v); });
}

// ---- Decoder layer -------------------------------------------------------------
DecoderLayer::DecoderLayer(const LayerOptions& o, Generator& init, Generator& dg)
    : pre_norm(o.pre_norm) {
  self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(o.d_model, o.heads, true, init));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(o.d_model));
  cross_attn = register_module("cross_attn", std::make_shared<MultiHeadAttention>(o.d_model, o.heads, true, init));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(o.d_model));
  ffn = register_module("ffn", std::make_shared<FeedForward>(o.d_model, o.d_ff, o.activation, init));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(o.d_model));
  drop1 = register_module("drop1", std::make_shared<Dropout>(o.dropout, dg));
  drop2 = register_module("drop2", std::make_shared<Dropout>(o.dropout, dg));
  drop3 = register_module("drop3", std::make_shared<Dropout>(o.dropout, dg));
}

Var DecoderLayer::forward(const Var& y, const Var& memory, const AttentionMask& self_mask,
                          const AttentionMask& cross_mask) {
  ModuleScope scope(this);
  // (B,T,D), memory (B,S,D) -> (B,T,D)
  Var h = sublayer(y, *norm1, *drop1, pre_norm,
                   [&](const Var& v) { return self_attn->forward(v, v, self_mask); });
  h = sublayer(h, *norm2, *drop2, pre_norm,
               [&](const Var& v) { return cross_attn->forward(v, memory, cross_mask); });
  return sublayer(h, *norm3, *drop3, pre_norm, [&](const Var& v) { return ffn->forward(v); });
}

// ---- Stacks ----------------------------------------------------------------------
Encoder::Encoder(int64_t n, const LayerOptions& o, Generator& init, Generator& dg) {
  if (n < 1) throw Error("Encoder: needs at least one layer, got " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i)
    layers.push_back(register_module("layers." + std::to_string(i), std::make_shared<EncoderLayer>(o, init, dg)));
  if (o.pre_norm) norm = register_module("norm", std::make_shared<LayerNorm>(o.d_model));
}

Var Encoder::forward(const Var& x, const AttentionMask& mask) {
  ModuleScope scope(this);
  Var h = x;
  for (auto& layer : layers) h = layer->forward(h, mask);
  return norm ? norm->forward(h) : h;
}

Decoder::Decoder(int64_t n, const LayerOptions& o, Generator& init, Generator& dg) {
  if (n < 1) throw Error("Decoder: needs at least one layer, got " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i)
    layers.push_back(register_module("layers." + std::to_string(i), std::make_shared<DecoderLayer>(o, init, dg)));
  if (o.pre_norm) norm = register_module("norm", std::make_shared<LayerNorm>(o.d_model));
}

Var Decoder::forward(const Var& y, const Var& memory, const AttentionMask& self_mask,
                     const AttentionMask& cross_mask) {
  ModuleScope scope(this);
  Var h = y;
  for (auto& layer : layers) h = layer->forward(h, memory, self_mask, cross_mask);
  return norm ? norm->forward(h) : h;
}

// ---- Encoder-decoder model ----------------------------------------------------------
Seq2SeqTransformer::Seq2SeqTransformer(const TransformerConfig& c)
    : cfg(c), init_gen(c.seed), dropout_gen(c.seed ^ 0x9e3779b97f4a7c15ULL) {
  if (c.src_vocab <= 0 || c.tgt_vocab <= 0)
    throw Error("Seq2SeqTransformer: vocabulary sizes must be positive");
  const LayerOptions o = c.layer();
  src_embed = register_module("src_embed", std::make_shared<Embedding>(c.src_vocab, c.d_model, init_gen));
  tgt_embed = register_module("tgt_embed", std::make_shared<Embedding>(c.tgt_vocab, c.d_model, init_gen));
  // As the Annotated Transformer does: Xavier-uniform embeddings, so that after
  // the sqrt(D) scaling they have unit-order entries like the positions they
  // are added to (N(0,1) would make them sqrt(D) times larger).
  src_embed->weight.data().copy_(xavier_uniform({c.src_vocab, c.d_model}, init_gen));
  tgt_embed->weight.data().copy_(xavier_uniform({c.tgt_vocab, c.d_model}, init_gen));
  if (c.learned_positions) {
    src_pos = register_module("src_pos", std::make_shared<LearnedPositionalEmbedding>(c.max_len, c.d_model, init_gen));
    tgt_pos = register_module("tgt_pos", std::make_shared<LearnedPositionalEmbedding>(c.max_len, c.d_model, init_gen));
  } else {
    sin_pos = std::make_shared<SinusoidalPositionalEncoding>(c.d_model, c.max_len);
  }
  src_drop = register_module("src_drop", std::make_shared<Dropout>(c.dropout, dropout_gen));
  tgt_drop = register_module("tgt_drop", std::make_shared<Dropout>(c.dropout, dropout_gen));
  encoder = register_module("encoder", std::make_shared<Encoder>(c.encoder_layers, o, init_gen, dropout_gen));
  decoder = register_module("decoder", std::make_shared<Decoder>(c.decoder_layers, o, init_gen, dropout_gen));
  if (c.tie_weights) {
    // Only the bias is the generator's own; the weight is tgt_embed.weight.
    generator = std::make_shared<Linear>(c.d_model, c.tgt_vocab, true, init_gen);
    generator->weight = tgt_embed->weight;
    struct BiasOnly : Module {
      explicit BiasOnly(const Var& b) { register_parameter("bias", b); }
    };
    register_module("generator", std::make_shared<BiasOnly>(generator->bias));
  } else {
    generator = register_module("generator", std::make_shared<Linear>(c.d_model, c.tgt_vocab, true, init_gen));
  }
}

Var Seq2SeqTransformer::embed(const Tokens& t, Embedding& emb, LearnedPositionalEmbedding* pos,
                              Dropout& drop) {
  // (B,L) ids -> (B,L,D): embedding * sqrt(D) + positions, then dropout (section 3.4/5.4)
  Var x = emb.forward(t.ids, {t.batch, t.len}, std::sqrt(static_cast<real>(cfg.d_model)));
  x = pos ? pos->forward(x) : sin_pos->forward(x);
  return drop.forward(x);
}

Var Seq2SeqTransformer::encode(const Tokens& src) {
  ModuleScope scope(this);  // names the modules in detect-anomaly reports (module.h)
  src.check("Seq2SeqTransformer::encode");
  Var x = embed(src, *src_embed, src_pos.get(), *src_drop);
  // Tokens and AttentionMask agree that no lengths means nothing is padding.
  return encoder->forward(x, AttentionMask::padding(src.lengths));
}

Var Seq2SeqTransformer::decode(const Tokens& tgt, const Var& memory, const Tokens& src) {
  ModuleScope scope(this);
  tgt.check("Seq2SeqTransformer::decode");
  if (memory.dim() != 3 || memory.size(0) != tgt.batch || memory.size(1) != src.len)
    throw Error("Seq2SeqTransformer::decode: memory " + to_string(memory.shape()) +
                " does not match target batch " + std::to_string(tgt.batch) +
                " and source length " + std::to_string(src.len));
  Var y = embed(tgt, *tgt_embed, tgt_pos.get(), *tgt_drop);
  y = decoder->forward(y, memory, AttentionMask::causal_padding(tgt.lengths),
                       AttentionMask::padding(src.lengths));
  return linear(y, generator->weight, generator->bias);  // (B,T,D) -> (B,T,V)
}

void Seq2SeqTransformer::keep_attention(bool on) {
  for (auto& layer : decoder->layers) layer->cross_attn->keep_attention(on);
}

std::vector<Tensor> Seq2SeqTransformer::cross_attention() const {
  std::vector<Tensor> out;
  for (auto& layer : decoder->layers) out.push_back(layer->cross_attn->last_attention());
  return out;
}

// ---- Decoder-only language model --------------------------------------------------------
GPT::GPT(const GPTConfig& c) : cfg(c), init_gen(c.seed), dropout_gen(c.seed ^ 0x9e3779b97f4a7c15ULL) {
  const LayerOptions o{c.d_model, c.heads, c.d_ff, c.dropout, c.activation, c.pre_norm};
  tok_embed = register_module("tok_embed", std::make_shared<Embedding>(c.vocab, c.d_model, init_gen));
  pos_embed = register_module("pos_embed", std::make_shared<LearnedPositionalEmbedding>(c.max_len, c.d_model, init_gen));
  // GPT-2's initialisation: N(0, 0.02) for token and position tables (with a
  // tied head, N(0,1) rows would start the logits at the scale of D).
  tok_embed->weight.data().copy_(normal_init({c.vocab, c.d_model}, real(0.02), init_gen));
  pos_embed->weight.data().copy_(normal_init({c.max_len, c.d_model}, real(0.02), init_gen));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout, dropout_gen));
  for (int64_t i = 0; i < c.layers; ++i)
    layers.push_back(register_module("layers." + std::to_string(i), std::make_shared<EncoderLayer>(o, init_gen, dropout_gen)));
  if (c.pre_norm) norm = register_module("norm", std::make_shared<LayerNorm>(c.d_model));
  if (!c.tie_weights) lm_head = register_module("lm_head", std::make_shared<Linear>(c.d_model, c.vocab, false, init_gen));
}

Var GPT::forward(const Tokens& t) {
  ModuleScope scope(this);
  t.check("GPT::forward");
  // (B,T) -> (B,T,D): token + learned position embeddings (no sqrt(D) scaling)
  Var x = drop->forward(pos_embed->forward(tok_embed->forward(t.ids, {t.batch, t.len})));
  const AttentionMask mask = AttentionMask::causal_padding(t.lengths);
  for (auto& layer : layers) x = layer->forward(x, mask);
  if (norm) x = norm->forward(x);
  return linear(x, lm_head ? lm_head->weight : tok_embed->weight);  // (B,T,V)
}

// ---- Encoder-only model --------------------------------------------------------------------
EncoderOnlyModel::EncoderOnlyModel(int64_t vocab, int64_t n_classes, int64_t n_layers,
                                   const LayerOptions& o, uint64_t seed)
    : init_gen(seed), dropout_gen(seed ^ 0x9e3779b97f4a7c15ULL), d_model(o.d_model) {
  embed = register_module("embed", std::make_shared<Embedding>(vocab, o.d_model, init_gen));
  embed->weight.data().copy_(xavier_uniform({vocab, o.d_model}, init_gen));  // as Seq2SeqTransformer
  pos = std::make_shared<SinusoidalPositionalEncoding>(o.d_model);
  drop = register_module("drop", std::make_shared<Dropout>(o.dropout, dropout_gen));
  encoder = register_module("encoder", std::make_shared<Encoder>(n_layers, o, init_gen, dropout_gen));
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
