// A model file's configuration checked against its tensors before any model
// is built from it (checkpoint/model_file.h: check_config_fits), and the
// number of parameters a configuration implies (parameter_count).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "checkpoint/bert_codec.h"
#include "checkpoint/vit_codec.h"
#include "checkpoint/model_file.h"
#include "core/error.h"
#include "nn/ffn.h"
#include "nn/norm.h"
#include "nn/swiglu.h"

namespace qkv::nn {

// ---- a configuration against the tensors of a file ----------------------------------

namespace {

// A count or a config value for a message: whole numbers below 10^15 in
// full (1234567), others to 6 digits (1.5e+21, 0.1).
std::string number_text(double v) {
  char text[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(text, sizeof text, "%.0f", v);
  else
    std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

// check_config_fits's reading of one file: each check names the file, the
// config key and the tensor it was compared with.
class ConfigFit {
 public:
  ConfigFit(const TensorFile& f, const std::string& prefix) : f_(f), prefix_(prefix) {}

  [[noreturn]] void fail(const std::string& msg) const { throw Error(brief(f_.path) + ": " + msg); }
  static std::string key_is(const char* key, int64_t v) {
    return std::string("model_config key '") + key + "' is " + std::to_string(v);
  }
  std::string tensor_name(const std::string& name) const {
    return "'" + brief(prefix_ + name) + "'";
  }

  void at_least(const char* key, int64_t v, int64_t lo) const {
    if (v < lo) fail(key_is(key, v) + ": must be at least " + std::to_string(lo));
  }

  // The matrix prefix + name, which `key` is checked against: present and 2-D.
  const Tensor& matrix(const std::string& name, const char* key) const {
    const std::string full = prefix_ + name;
    for (const auto& [n, t] : f_.tensors) {
      if (n != full) continue;
      if (t.dim() != 2)
        fail("tensor " + tensor_name(name) + " has shape " + to_string(t.shape()) +
             ", not a matrix (model_config key '" + key + "' is checked against it)");
      return t;
    }
    fail("model_config key '" + std::string(key) + "' cannot be checked: the file has no tensor " +
         tensor_name(name));
  }

  // Dimension `dim` of `t` (the tensor prefix + name) is config value v of `key`.
  void size_is(const std::string& name, const Tensor& t, int dim, const char* key,
               int64_t v) const {
    if (t.size(dim) != v)
      fail(key_is(key, v) + " but tensor " + tensor_name(name) + " has shape " +
           to_string(t.shape()));
  }

  // `key` counts the layers of a stack whose tensors are named
  // prefix + stack + "<i>.*": it must be one more than the largest index i.
  void layers_are(const std::string& stack, const char* key, int64_t layers) const {
    const std::string start = prefix_ + stack;
    int64_t found = 0;
    for (const auto& [n, t] : f_.tensors) {
      if (n.compare(0, start.size(), start) != 0) continue;
      const size_t dot = n.find('.', start.size());
      const std::string index =
          n.substr(start.size(), dot == std::string::npos ? std::string::npos : dot - start.size());
      if (index.empty() || index.size() > 9 ||
          index.find_first_not_of("0123456789") != std::string::npos)
        continue;  // not a layer's tensor: load_state_dict names it
      found = std::max<int64_t>(found, std::stoll(index) + 1);
    }
    if (found != layers)
      fail(key_is(key, layers) + " but the file has tensors for " + std::to_string(found) + " (" +
           (found == 0 ? "none named '" + brief(start) + "<i>.*'"
                       : "'" + brief(start) + "0.*'" +
                             (found > 1 ? " to '" + brief(start) + std::to_string(found - 1) + ".*'"
                                        : "")) +
           ")");
  }

  // d_ff against the FFN's first matrix `name` (F, D), F = d_ff or, for
  // SwiGLU, swiglu_hidden(d_ff) (the message says which).
  void ffn_fits(const std::string& name, int64_t d_ff, int64_t F, int64_t d_model) const {
    at_least("d_ff", d_ff, 1);
    const Tensor& w1 = matrix(name, "d_ff");
    if (w1.size(0) != F)
      fail(key_is("d_ff", d_ff) +
           (F != d_ff ? " (a SwiGLU hidden width of " + std::to_string(F) + ")" : std::string()) +
           " but tensor " + tensor_name(name) + " has shape " + to_string(w1.shape()));
    size_is(name, w1, 1, "d_model", d_model);
  }

  void dropout_ok(real p) const {
    if (!(p >= 0 && p < 1))
      fail("model_config key 'dropout' is " + number_text(double(p)) + ": must be in [0, 1)");
  }

  void heads_ok(int64_t heads, int64_t d_model) const {
    at_least("heads", heads, 1);
    if (d_model % heads != 0)
      fail(key_is("heads", heads) + ", which does not divide d_model " + std::to_string(d_model));
  }

  // The query/key head size d_k (0: d_model / heads) against W_Q of the
  // attention `name` (its weight is (heads * d_k, d_model)).
  void d_k_fits(const std::string& name, int64_t heads, int64_t d_model, int64_t d_k) const {
    const int64_t dk = d_k > 0 ? d_k : d_model / heads;
    const Tensor& wq = matrix(name, "d_k");
    if (double(wq.size(0)) != double(heads) * double(dk) || wq.size(1) != d_model)
      fail(std::string("model_config keys 'heads' ") + std::to_string(heads) + ", 'd_k' " +
           std::to_string(dk) + (d_k > 0 ? "" : " (d_model / heads)") + " and 'd_model' " +
           std::to_string(d_model) + " make (heads*d_k, d_model) but tensor " + tensor_name(name) +
           " has shape " + to_string(wq.shape()));
  }

  // The model holds every parameter in the file (load_state_dict is strict),
  // so one that would hold far more numbers than the file is refused before
  // it is built: this bounds what a loader allocates by the file's size
  // whatever else the configuration says (say, a layer count met by one stray
  // tensor). Up to twice the file's numbers (plus 2^20) is built, so that
  // load_state_dict can name the tensors that are missing or unexpected.
  void count_fits(double model_numbers) const {
    double in_file = 0;
    for (const auto& [n, t] : f_.tensors)
      if (n.compare(0, prefix_.size(), prefix_) == 0) in_file += double(t.numel());
    if (model_numbers > 2 * in_file + double(1 << 20))
      fail("model_config describes a model of " + number_text(model_numbers) +
           " parameters but the file holds " + number_text(in_file) +
           " numbers under the prefix '" + brief(prefix_) + "'");
  }

 private:
  const TensorFile& f_;
  const std::string& prefix_;
};

// Numbers in one attention block: 4 projections, W_Q (E, D) with
// E = heads * d_k, W_K (Ek, D), W_V (Dv, D), W_O (D, D), each with its bias
// unless bias = false. Ek = K * d_k and Dv = K * d_v for K key/value heads
// (grouped-query attention; K = heads: Ek = E, Dv = D).
double attention_numbers(double D, double E, double Ek, double Dv, bool bias) {
  return (E + Ek + Dv + D) * D + (bias ? E + Ek + Dv + D : 0);
}
// E = heads * d_k of a config (d_k 0: d_model / heads, E = d_model).
template <class C>
double qk_width(const C& c) {
  return c.d_k > 0 ? double(c.heads) * double(c.d_k) : double(c.d_model);
}
// A norm's numbers over D features: its gain, and LayerNorm's shift
// (nn/norm.h's table; an unknown kind was refused when the config was read).
template <class C>
double norm_numbers(const C& c) {
  const NormKind* k = find_norm(c.norm);
  return double(k ? k->numbers_per_feature : 2) * double(c.d_model);
}
// The FFN's hidden width for the config (nn::ffn_hidden), for any d_ff a
// file may hold: one below 1 is refused by ffn_fits, one beyond 2^50 cannot
// fit a file and is compared as it is.
template <class C>
int64_t ffn_rows(const C& c) {
  const int64_t d_ff = c.d_ff;
  if (d_ff < 1 || d_ff > (int64_t(1) << 50)) return d_ff;
  return ffn_hidden(c.activation, c.d_ff);
}

// The feed-forward block (nn/ffn.h): FeedForward W1 (F, D), W2 (D, F) and
// their biases; SwiGLU three matrices of hidden width swiglu_hidden(d_ff), no biases.
// A mixture of experts (experts > 0): E such blocks and the router (E, D).
template <class C>
double ffn_numbers(const C& c) {
  const double D = double(c.d_model), F = double(ffn_rows(c));
  const double one =
      c.activation == Activation::SwiGLU ? 3 * D * F : 2 * D * F + (c.bias ? F + D : 0);
  if (c.moe.experts > 0) return double(c.moe.experts) * (one + D);
  return one;
}
// One layer of a stack: `attentions` attention blocks, as many norms plus
// the FFN's, and the FFN.
// The first attention is the self-attention, with kv_heads key/value heads
// (0: every head); a decoder's cross-attention keeps every head.
template <class C>
double layer_numbers(const C& c, int attentions) {
  const double D = double(c.d_model), E = qk_width(c);
  const double H = double(c.heads), K = c.kv_heads > 0 ? double(c.kv_heads) : H;
  return attention_numbers(D, E, E / H * K, D / H * K, c.bias) +
         (attentions - 1) * attention_numbers(D, E, E, D, c.bias) +
         (attentions + 1) * norm_numbers(c) + ffn_numbers(c);
}

// The FFN tensor d_ff is checked against, and the rows d_ff gives it:
// linear1.weight (d_ff, D), or SwiGLU's gate.weight (swiglu_hidden(d_ff), D).
// With experts: the first expert's (ffn.experts.0.linear1.weight ...).
template <class C>
std::string ffn_first(const C& c) {
  const std::string block = c.moe.experts > 0 ? "ffn.experts.0." : "ffn.";
  return block + (c.activation == Activation::SwiGLU ? "gate.weight" : "linear1.weight");
}

}  // namespace

double parameter_count(const TransformerConfig& c) {
  const double D = double(c.d_model);
  double n = double(c.src_vocab) * D + double(c.tgt_vocab) * D;  // the embeddings
  if (c.learned_positions && !c.relative())
    n += 2 * double(c.max_positions) * D;                              // src_pos, tgt_pos
  if (c.relative()) n += 2 * double(c.heads) * double(c.rel_buckets);  // each stack's rel_bias
  n += double(c.encoder_layers) * layer_numbers(c, 1) +
       double(c.decoder_layers) * layer_numbers(c, 2);
  if (c.pre_norm) n += 2 * norm_numbers(c);                // each stack's final norm
  n += double(c.tgt_vocab) * (c.tie_weights ? 1 : D + 1);  // lm_head: bias (+ weight)
  return n;
}

double parameter_count(const GPTConfig& c) {
  const double D = double(c.d_model);
  double n = double(c.vocab) * D +
             (c.rope_base > 0 || c.relative() ? 0 : double(c.max_positions) * D) +  // no table
             double(c.layers) * layer_numbers(c, 1);
  if (c.relative()) n += double(c.heads) * double(c.rel_buckets);  // rel_bias
  if (c.pre_norm) n += norm_numbers(c);
  if (!c.tie_weights) n += double(c.vocab) * D;  // lm_head, no bias
  return n;
}

double parameter_count(const EncoderOnlyConfig& c) {
  const double D = double(c.d_model);
  double n = double(c.vocab) * D + double(c.layers) * layer_numbers(c, 1);
  if (c.pre_norm) n += norm_numbers(c);
  if (c.relative()) n += double(c.heads) * double(c.rel_buckets);  // encoder.rel_bias
  return n + double(c.classes) * (D + 1);                          // head, with bias
}

// The ViT's numbers from its keys, in doubles (a hostile image or patch
// cannot overflow): N = (image / patch)^2 patches of C*P*P numbers.
double parameter_count(const ViTConfig& c) {
  const double D = double(c.d_model), P = double(c.patch), side = double(c.image / c.patch);
  double n = D * double(c.channels) * P * P + D  // patch.weight, patch.bias
             + D + (side * side + 1) * D;        // cls_token, pos_embed
  n += double(c.layers) * layer_numbers(c, 1);
  if (c.pre_norm) n += norm_numbers(c);    // the encoder's final norm
  return n + double(c.classes) * (D + 1);  // head, with bias
}

void check_config_fits(const TensorFile& f, const std::string& prefix, const ViTConfig& c) {
  const ConfigFit fit(f, prefix);
  fit.at_least("d_model", c.d_model, 1);
  fit.at_least("image", c.image, 1);
  fit.at_least("channels", c.channels, 1);
  fit.at_least("patch", c.patch, 1);
  fit.at_least("classes", c.classes, 1);
  if (c.image % c.patch != 0)
    fit.fail(ConfigFit::key_is("image", c.image) + ", not a multiple of 'patch' " +
             std::to_string(c.patch));
  const Tensor& proj = fit.matrix("patch.weight", "patch");  // (D, C*P*P)
  fit.size_is("patch.weight", proj, 0, "d_model", c.d_model);
  if (double(proj.size(1)) != double(c.channels) * double(c.patch) * double(c.patch))
    fit.fail("model_config keys 'channels' " + std::to_string(c.channels) + " and 'patch' " +
             std::to_string(c.patch) + " make patches of C*P*P numbers but tensor " +
             fit.tensor_name("patch.weight") + " has shape " + to_string(proj.shape()));
  const Tensor& table = fit.matrix("pos_embed", "image");  // (N+1, D)
  const double side = double(c.image / c.patch);
  if (double(table.size(0)) != side * side + 1 || table.size(1) != c.d_model)
    fit.fail("model_config keys 'image' " + std::to_string(c.image) + " and 'patch' " +
             std::to_string(c.patch) + " make (image/patch)^2 + 1 = " +
             number_text(side * side + 1) + " positions but tensor " +
             fit.tensor_name("pos_embed") + " has shape " + to_string(table.shape()));
  const Tensor& head = fit.matrix("head.weight", "classes");
  fit.size_is("head.weight", head, 0, "classes", c.classes);  // (classes, D)
  fit.heads_ok(c.heads, c.d_model);
  fit.at_least("layers", c.layers, 1);
  fit.layers_are("encoder.layers.", "layers", c.layers);
  fit.d_k_fits("encoder.layers.0.self_attn.w_q.weight", c.heads, c.d_model, c.d_k);
  fit.ffn_fits("encoder.layers.0." + ffn_first(c), c.d_ff, ffn_rows(c), c.d_model);
  fit.dropout_ok(c.dropout);
  fit.count_fits(parameter_count(c));
}

void check_config_fits(const TensorFile& f, const std::string& prefix, const EncoderOnlyConfig& c) {
  const ConfigFit fit(f, prefix);
  fit.at_least("d_model", c.d_model, 1);
  fit.at_least("vocab", c.vocab, 1);
  fit.at_least("classes", c.classes, 1);
  const Tensor& emb = fit.matrix("embed.weight", "d_model");
  fit.size_is("embed.weight", emb, 1, "d_model", c.d_model);  // (V, D)
  fit.size_is("embed.weight", emb, 0, "vocab", c.vocab);
  const Tensor& head = fit.matrix("head.weight", "classes");
  fit.size_is("head.weight", head, 0, "classes", c.classes);  // (classes, D)
  fit.heads_ok(c.heads, c.d_model);
  fit.at_least("layers", c.layers, 1);
  fit.layers_are("encoder.layers.", "layers", c.layers);
  fit.d_k_fits("encoder.layers.0.self_attn.w_q.weight", c.heads, c.d_model, c.d_k);
  fit.ffn_fits("encoder.layers.0." + ffn_first(c), c.d_ff, ffn_rows(c), c.d_model);
  fit.dropout_ok(c.dropout);
  fit.count_fits(parameter_count(c));
}

void check_config_fits(const TensorFile& f, const std::string& prefix, const TransformerConfig& c) {
  const ConfigFit fit(f, prefix);
  fit.at_least("d_model", c.d_model, 1);
  for (auto [name, key, vocab] : {std::make_tuple("src_embed.weight", "src_vocab", c.src_vocab),
                                  std::make_tuple("tgt_embed.weight", "tgt_vocab", c.tgt_vocab)}) {
    fit.at_least(key, vocab, 1);
    const Tensor& emb = fit.matrix(name, "d_model");
    fit.size_is(name, emb, 1, "d_model", c.d_model);  // (V, D)
    fit.size_is(name, emb, 0, key, vocab);
  }
  fit.heads_ok(c.heads, c.d_model);
  fit.at_least("encoder_layers", c.encoder_layers, 1);
  fit.at_least("decoder_layers", c.decoder_layers, 1);
  fit.layers_are("encoder.layers.", "encoder_layers", c.encoder_layers);
  fit.layers_are("decoder.layers.", "decoder_layers", c.decoder_layers);
  for (const char* name :
       {"encoder.layers.0.self_attn.w_q.weight", "decoder.layers.0.self_attn.w_q.weight",
        "decoder.layers.0.cross_attn.w_q.weight"})
    fit.d_k_fits(name, c.heads, c.d_model, c.d_k);
  for (const char* stack : {"encoder.layers.0.", "decoder.layers.0."})
    fit.ffn_fits(stack + ffn_first(c), c.d_ff, ffn_rows(c), c.d_model);
  if (c.learned_positions && !c.relative()) {
    for (const char* name : {"src_pos.weight", "tgt_pos.weight"}) {
      const Tensor& table = fit.matrix(name, "max_positions");
      fit.size_is(name, table, 0, "max_positions", c.max_positions);  // (max_positions, D)
      fit.size_is(name, table, 1, "d_model", c.d_model);
    }
  } else {
    // The sinusoidal table is computed, not read: any max_positions the model
    // takes is read back (nn::save_model writes it), and the loader builds at
    // most SinusoidalPositionalEncoding::kEagerRows rows of it (the rest as a
    // sequence needs them), so a file's number allocates nothing by itself.
    fit.at_least("max_positions", c.max_positions, 0);
  }
  fit.dropout_ok(c.dropout);
  fit.count_fits(parameter_count(c));
}

void check_config_fits(const TensorFile& f, const std::string& prefix, const GPTConfig& c) {
  const ConfigFit fit(f, prefix);
  fit.at_least("d_model", c.d_model, 1);
  fit.at_least("vocab", c.vocab, 1);
  const Tensor& emb = fit.matrix("tok_embed.weight", "d_model");
  fit.size_is("tok_embed.weight", emb, 1, "d_model", c.d_model);  // (V, D)
  fit.size_is("tok_embed.weight", emb, 0, "vocab", c.vocab);
  fit.heads_ok(c.heads, c.d_model);
  fit.at_least("layers", c.layers, 0);
  fit.layers_are("layers.", "layers", c.layers);
  if (c.layers > 0) {
    fit.d_k_fits("layers.0.self_attn.w_q.weight", c.heads, c.d_model, c.d_k);
    fit.ffn_fits("layers.0." + ffn_first(c), c.d_ff, ffn_rows(c), c.d_model);
  }
  if (c.rope_base > 0 || c.relative()) {
    // Rotary or relative positions: no table; max_positions bounds the sequences read.
    fit.at_least("max_positions", c.max_positions, 1);
  } else {
    const Tensor& table = fit.matrix("pos_embed.weight", "max_positions");
    fit.size_is("pos_embed.weight", table, 0, "max_positions",
                c.max_positions);  // (max_positions, D)
    fit.size_is("pos_embed.weight", table, 1, "d_model", c.d_model);
  }
  fit.dropout_ok(c.dropout);
  fit.count_fits(parameter_count(c));
}

double parameter_count(const BertConfig& c) {
  const double D = double(c.d_model);
  // token, segment and position tables, the embeddings' norm, the layers
  double n = (double(c.vocab) + double(c.segments) + double(c.max_positions)) * D +
             norm_numbers(c) + double(c.layers) * layer_numbers(c, 1);
  if (c.pre_norm) n += norm_numbers(c);        // the encoder's final norm
  if (c.head == "qa") return n + 2 * (D + 1);  // qa_outputs (2, D) and its bias
  n += D * D + D;                              // mlm.dense or the pooler
  if (c.head == "mlm") return n + norm_numbers(c) + double(c.vocab);  // mlm.norm, mlm.bias (tied)
  return n + double(c.classes) * (D + 1);                             // the classifier
}

void check_config_fits(const TensorFile& f, const std::string& prefix, const BertConfig& c) {
  const ConfigFit fit(f, prefix);
  fit.at_least("d_model", c.d_model, 1);
  fit.at_least("vocab", c.vocab, 1);
  const Tensor& emb = fit.matrix("embed.weight", "d_model");
  fit.size_is("embed.weight", emb, 1, "d_model", c.d_model);  // (V, D)
  fit.size_is("embed.weight", emb, 0, "vocab", c.vocab);
  fit.at_least("segments", c.segments, 1);
  const Tensor& seg = fit.matrix("segment_embed.weight", "segments");
  fit.size_is("segment_embed.weight", seg, 0, "segments", c.segments);  // (segments, D)
  fit.size_is("segment_embed.weight", seg, 1, "d_model", c.d_model);
  fit.at_least("max_positions", c.max_positions, 1);
  const Tensor& table = fit.matrix("pos_embed.weight", "max_positions");
  fit.size_is("pos_embed.weight", table, 0, "max_positions",
              c.max_positions);  // (max_positions, D)
  fit.size_is("pos_embed.weight", table, 1, "d_model", c.d_model);
  if (c.head == "mlm") {
    const Tensor& dense = fit.matrix("mlm.dense.weight", "head");
    fit.size_is("mlm.dense.weight", dense, 0, "d_model", c.d_model);  // (D, D)
  } else if (c.head == "qa") {
    const Tensor& qa = fit.matrix("qa_outputs.weight", "head");
    fit.size_is("qa_outputs.weight", qa, 1, "d_model", c.d_model);  // (2, D)
  } else {
    fit.at_least("classes", c.classes, 1);
    const Tensor& cls = fit.matrix("classifier.weight", "classes");
    fit.size_is("classifier.weight", cls, 0, "classes", c.classes);  // (classes, D)
    fit.size_is("classifier.weight", cls, 1, "d_model", c.d_model);
  }
  fit.heads_ok(c.heads, c.d_model);
  fit.at_least("layers", c.layers, 1);
  fit.layers_are("encoder.layers.", "layers", c.layers);
  fit.d_k_fits("encoder.layers.0.self_attn.w_q.weight", c.heads, c.d_model, c.d_k);
  fit.ffn_fits("encoder.layers.0." + ffn_first(c), c.d_ff, ffn_rows(c), c.d_model);
  fit.dropout_ok(c.dropout);
  fit.count_fits(parameter_count(c));
}

}  // namespace qkv::nn
