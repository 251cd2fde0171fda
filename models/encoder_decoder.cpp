#include "models/encoder_decoder.h"

#include <cmath>
#include <string>

#include "autograd/ops.h"
#include "autograd/recompute.h"
#include "core/error.h"
#include "nn/init.h"
#include "nn/relative_bias.h"
#include "nn/sublayer.h"

namespace qkv::nn {

namespace {

// The options' attention kernel and scale on a layer's attention modules.
void set_kernel(MultiHeadAttention& a, const LayerOptions& o, bool self_attention) {
  const AttentionSettings& s = o.attn;
  a.scale = s.scaled ? 0 : 1;                     // 0: 1/sqrt(d_k); 1: unscaled scores
  if (self_attention) a.rope_base = s.rope_base;  // rotary positions: self-attention only
  const bool same_maths =
      s.attention == AttentionKernel::MemoryEfficient || s.attention == AttentionKernel::Auto;
  if (!self_attention && !same_maths) return;
  a.kernel = s.attention;
  a.memory_budget = s.attention_memory_budget;
  a.sparse.window = s.window;
  a.sparse.global_every = s.global_every;
}

// f(x), or with Recompute::FFN the same numbers kept for backward as ffn's input only.
Var feed_forward(const FFN& ffn, const Var& x, Recompute r) {
  if (r != Recompute::FFN || !x.requires_grad()) return ffn.forward(x);
  return recompute([&ffn](const std::vector<Var>& in) { return ffn.forward(in[0]); }, {x});
}

}  // namespace

// ---- Encoder layer -------------------------------------------------------------
EncoderLayer::EncoderLayer(const LayerOptions& o, Generator& init, Generator& dg)
    : pre_norm(o.pre_norm), recompute(o.attn.recompute), dropout_gen_(&dg) {
  self_attn = register_module(
      "self_attn", std::make_shared<MultiHeadAttention>(o.d_model, o.heads, o.attn.bias, init,
                                                        o.attn.d_k, o.attn.kv_heads));
  norm1 = register_module("norm1", make_norm(o.attn.norm, o.d_model));
  ffn =
      register_module("ffn", make_layer_ffn(o.activation, o.d_model, o.d_ff, o.attn.bias,
                                            o.attn.moe, o.attn.recompute != Recompute::None, init));
  norm2 = register_module("norm2", make_norm(o.attn.norm, o.d_model));
  drop1 = register_module("drop1", std::make_shared<Dropout>(o.dropout, dg));
  drop2 = register_module("drop2", std::make_shared<Dropout>(o.dropout, dg));
  set_kernel(*self_attn, o, true);
}

Var EncoderLayer::forward(const Var& x, const AttentionMask& self_mask) {
  ModuleScope scope(this);
  // (B,S,D) -> (B,S,D)
  auto layer = [this](const Var& x, const AttentionMask& self_mask) {
    Var h = sublayer(x, *norm1, *drop1, pre_norm,
                     [&](const Var& v) { return self_attn->forward(v, v, self_mask); });
    return sublayer(h, *norm2, *drop2, pre_norm,
                    [&](const Var& v) { return feed_forward(*ffn, v, recompute); });
  };
  if (recompute != Recompute::Layer || !x.requires_grad()) return layer(x, self_mask);
  // the whole layer again in backward, its dropout masks replayed (the mask copied)
  return qkv::recompute(
      [layer, self_mask](const std::vector<Var>& in) { return layer(in[0], self_mask); }, {x},
      {dropout_gen_});
}

// ---- Decoder layer -------------------------------------------------------------
// Registers its modules as EncoderLayer does, plus cross-attention: spelled
// out, in the order of the forward, so the parameter names read off the code.
DecoderLayer::DecoderLayer(const LayerOptions& o, Generator& init, Generator& dg)
    : pre_norm(o.pre_norm), recompute(o.attn.recompute), dropout_gen_(&dg) {
  self_attn = register_module(
      "self_attn", std::make_shared<MultiHeadAttention>(o.d_model, o.heads, o.attn.bias, init,
                                                        o.attn.d_k, o.attn.kv_heads));
  norm1 = register_module("norm1", make_norm(o.attn.norm, o.d_model));
  cross_attn = register_module(
      "cross_attn",
      std::make_shared<MultiHeadAttention>(o.d_model, o.heads, o.attn.bias, init, o.attn.d_k));
  norm2 = register_module("norm2", make_norm(o.attn.norm, o.d_model));
  ffn =
      register_module("ffn", make_layer_ffn(o.activation, o.d_model, o.d_ff, o.attn.bias,
                                            o.attn.moe, o.attn.recompute != Recompute::None, init));
  norm3 = register_module("norm3", make_norm(o.attn.norm, o.d_model));
  drop1 = register_module("drop1", std::make_shared<Dropout>(o.dropout, dg));
  drop2 = register_module("drop2", std::make_shared<Dropout>(o.dropout, dg));
  drop3 = register_module("drop3", std::make_shared<Dropout>(o.dropout, dg));
  set_kernel(*self_attn, o, true);
  set_kernel(*cross_attn, o, false);
}

Var DecoderLayer::forward(const Var& y, const Var& memory, const AttentionMask& self_mask,
                          const AttentionMask& cross_mask) {
  ModuleScope scope(this);
  // (B,T,D), memory (B,S,D) -> (B,T,D)
  auto layer = [this](const Var& y, const Var& memory, const AttentionMask& self_mask,
                      const AttentionMask& cross_mask) {
    Var h = sublayer(y, *norm1, *drop1, pre_norm,
                     [&](const Var& v) { return self_attn->forward(v, v, self_mask); });
    h = sublayer(h, *norm2, *drop2, pre_norm,
                 [&](const Var& v) { return cross_attn->forward(v, memory, cross_mask); });
    return sublayer(h, *norm3, *drop3, pre_norm,
                    [&](const Var& v) { return feed_forward(*ffn, v, recompute); });
  };
  if (recompute != Recompute::Layer || !(y.requires_grad() || memory.requires_grad()))
    return layer(y, memory, self_mask, cross_mask);
  // the whole layer again in backward, its dropout masks replayed (the masks copied)
  return qkv::recompute(
      [layer, self_mask, cross_mask](const std::vector<Var>& in) {
        return layer(in[0], in[1], self_mask, cross_mask);
      },
      {y, memory}, {dropout_gen_});
}

// ---- Relative positions (T5) ----------------------------------------------------
Tensor relative_bias_init(const LayerOptions& o, bool bidirectional, Generator& init) {
  check_relative_bias("relative positions", o.attn.rel_buckets, o.attn.rel_max_distance,
                      bidirectional);
  return normal_init({o.heads, o.attn.rel_buckets},
                     real(1) / std::sqrt(static_cast<real>(o.d_model)), init);
}

void share_relative_bias(const Var& table, const LayerOptions& o, bool bidirectional,
                         const std::vector<MultiHeadAttention*>& attns) {
  for (MultiHeadAttention* a : attns) {
    a->rel_bias = table;
    a->rel_bidirectional = bidirectional;
    a->rel_max_distance = o.attn.rel_max_distance;
  }
}

// ---- Stacks ----------------------------------------------------------------------
// The table is registered after the layers, so the layers' initial weights
// are those of the same model without relative positions.
Encoder::Encoder(int64_t n, const LayerOptions& o, Generator& init, Generator& dg) {
  if (n < 1) throw Error("Encoder: needs at least one layer, got " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i)
    layers.push_back(register_module("layers." + std::to_string(i),
                                     std::make_shared<EncoderLayer>(o, init, dg)));
  if (o.pre_norm) norm = register_module("norm", make_norm(o.attn.norm, o.d_model));
  if (o.attn.rel_buckets > 0) {
    rel_bias = register_parameter("rel_bias", relative_bias_init(o, true, init));
    std::vector<MultiHeadAttention*> attns;
    for (auto& l : layers) attns.push_back(l->self_attn.get());
    share_relative_bias(rel_bias, o, true, attns);
  }
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
    layers.push_back(register_module("layers." + std::to_string(i),
                                     std::make_shared<DecoderLayer>(o, init, dg)));
  if (o.pre_norm) norm = register_module("norm", make_norm(o.attn.norm, o.d_model));
  if (o.attn.rel_buckets > 0) {
    rel_bias = register_parameter("rel_bias", relative_bias_init(o, false, init));
    std::vector<MultiHeadAttention*> attns;
    for (auto& l : layers) attns.push_back(l->self_attn.get());
    share_relative_bias(rel_bias, o, false, attns);  // causal; cross-attention has none
  }
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
    : cfg(c), init_gen(c.seed), dropout_gen(dropout_seed(c.seed)) {
  if (c.src_vocab <= 0 || c.tgt_vocab <= 0)
    throw Error("Seq2SeqTransformer: vocabulary sizes must be positive");
  if (c.rope_base != 0)
    throw Error(
        "Seq2SeqTransformer: rope_base is set, but rotary positions are a GPT's: this "
        "model adds a position table or T5's relative bias (leave rope_base 0)");
  const LayerOptions o = c.layer();
  src_embed =
      register_module("src_embed", std::make_shared<Embedding>(c.src_vocab, c.d_model, init_gen));
  tgt_embed =
      register_module("tgt_embed", std::make_shared<Embedding>(c.tgt_vocab, c.d_model, init_gen));
  // As the Annotated Transformer does: Xavier-uniform embeddings, so that after
  // the sqrt(D) scaling they have unit-order entries like the positions they
  // are added to (N(0,1) would make them sqrt(D) times larger).
  src_embed->weight.data().copy_(xavier_uniform({c.src_vocab, c.d_model}, init_gen));
  tgt_embed->weight.data().copy_(xavier_uniform({c.tgt_vocab, c.d_model}, init_gen));
  if (c.relative()) {
    // T5: no absolute positions; the stacks' relative bias tables say where
  } else if (c.learned_positions) {
    src_pos = register_module("src_pos", std::make_shared<LearnedPositionalEmbedding>(
                                             c.max_positions, c.d_model, init_gen));
    tgt_pos = register_module("tgt_pos", std::make_shared<LearnedPositionalEmbedding>(
                                             c.max_positions, c.d_model, init_gen));
  } else {
    sin_pos = std::make_shared<SinusoidalPositionalEncoding>(c.d_model, c.max_positions);
  }
  src_drop = register_module("src_drop", std::make_shared<Dropout>(c.dropout, dropout_gen));
  tgt_drop = register_module("tgt_drop", std::make_shared<Dropout>(c.dropout, dropout_gen));
  encoder = register_module("encoder",
                            std::make_shared<Encoder>(c.encoder_layers, o, init_gen, dropout_gen));
  decoder = register_module("decoder",
                            std::make_shared<Decoder>(c.decoder_layers, o, init_gen, dropout_gen));
  if (c.tie_weights) {
    // Only the bias is lm_head's own; the weight is tgt_embed.weight.
    lm_head = std::make_shared<Linear>(c.d_model, c.tgt_vocab, true, init_gen);
    lm_head->weight = tgt_embed->weight;
    struct BiasOnly : Module {
      explicit BiasOnly(const Var& b) { register_parameter("bias", b); }
    };
    register_module("lm_head", std::make_shared<BiasOnly>(lm_head->bias));
  } else {
    lm_head = register_module("lm_head",
                              std::make_shared<Linear>(c.d_model, c.tgt_vocab, true, init_gen));
  }
}

Var Seq2SeqTransformer::embed(const Tokens& t, Embedding& emb, LearnedPositionalEmbedding* pos,
                              Dropout& drop) {
  // (B,L) ids -> (B,L,D): embedding * sqrt(D) + positions, then dropout (section 3.4/5.4)
  Var x = emb.forward(t.ids, {t.batch, t.len}, std::sqrt(static_cast<real>(cfg.d_model)));
  if (pos)
    x = pos->forward(x);
  else if (sin_pos)
    x = sin_pos->forward(x);
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
  return linear(y, lm_head->weight, lm_head->bias);  // (B,T,D) -> (B,T,V)
}

void Seq2SeqTransformer::keep_attention(bool on) {
  for (auto& layer : decoder->layers) layer->cross_attn->keep_attention(on);
}

std::vector<Tensor> Seq2SeqTransformer::cross_attention() const {
  std::vector<Tensor> out;
  for (auto& layer : decoder->layers) out.push_back(layer->cross_attn->last_attention());
  return out;
}

// Encoder: the source; decoder: "<s> target" predicting "target </s>" (data::collate_pairs).
TeacherForced Seq2SeqTransformer::forward_pairs(const std::vector<data::Pair>& pairs) {
  data::Batch b = data::collate_pairs(pairs);
  return {forward(b.src, b.tgt_in), std::move(b.tgt_out), b.target_tokens};
}

std::vector<Tensor> Seq2SeqTransformer::source_attention(const data::Seq& src,
                                                         const data::Seq& tgt) {
  NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();  // the maps the model answers with: no dropout
  const data::Batch one = data::collate_pairs({{src, tgt}});
  keep_attention(true);
  forward(one.src, one.tgt_in);
  std::vector<Tensor> maps = cross_attention();
  keep_attention(false);
  if (was_training) train();
  return maps;
}

}  // namespace qkv::nn
