#include "checkpoint/model_file.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "core/error.h"
#include "io/json_bounded.h"

namespace qkv::nn {

using json = nlohmann::json;

namespace {

Activation parse_activation(const std::string& s, const std::string& where) {
  if (s == "relu") return Activation::ReLU;
  if (s == "gelu") return Activation::GELU;
  throw Error(where + ": key 'activation' is '" + brief(s) + "' (expected relu or gelu)");
}

// Visits every field of a config with its JSON key, so writing and reading
// cannot drift apart. Activation is stored by name.
template <class C, class F>
void transformer_fields(C& c, F&& f) {
  f("src_vocab", c.src_vocab);
  f("tgt_vocab", c.tgt_vocab);
  f("d_model", c.d_model);
  f("heads", c.heads);
  f("encoder_layers", c.encoder_layers);
  f("decoder_layers", c.decoder_layers);
  f("d_ff", c.d_ff);
  f("dropout", c.dropout);
  f("pre_norm", c.pre_norm);
  f("tie_weights", c.tie_weights);
  f("learned_positions", c.learned_positions);
  f("max_positions", c.max_positions);
  f("seed", c.seed);
}
template <class C, class F>
void gpt_fields(C& c, F&& f) {
  f("vocab", c.vocab);
  f("d_model", c.d_model);
  f("heads", c.heads);
  f("layers", c.layers);
  f("d_ff", c.d_ff);
  f("max_positions", c.max_positions);
  f("dropout", c.dropout);
  f("pre_norm", c.pre_norm);
  f("tie_weights", c.tie_weights);
  f("seed", c.seed);
}

template <class C, class F>
void encoder_fields(C& c, F&& f) {
  f("vocab", c.vocab);
  f("classes", c.classes);
  f("d_model", c.d_model);
  f("heads", c.heads);
  f("layers", c.layers);
  f("d_ff", c.d_ff);
  f("dropout", c.dropout);
  f("pre_norm", c.pre_norm);
  f("seed", c.seed);
}

// Every config's attention settings (models/encoder_decoder.h), the keys that
// change the function: the kernel, its sparse pattern, the scale. Files
// written before they existed lack them and read as the standard kernel.
template <class C, class F>
void attention_fields(C& c, F&& f) {
  f("window", c.window);
  f("global_every", c.global_every);
  f("scaled", c.scaled);
}

template <class C, class Fields>
json to_json_with(const C& c, Fields fields) {
  json j;
  fields(c, [&](const char* k, const auto& v) { j[k] = v; });
  j["activation"] = activation_name(c.activation);
  attention_fields(c, [&](const char* k, const auto& v) { j[k] = v; });
  j["attention"] = to_string(c.attention);
  return j;
}

template <class C, class Fields>
C from_json_with(const json& file_json, const std::string& where, Fields fields) {
  const json j = upgrade_model_config(file_json, where);
  C c;
  fields(c, [&](const char* k, auto& v) { read_json_field(j, k, v, where); });
  std::string act;
  read_json_field(j, "activation", act, where);
  c.activation = parse_activation(act, where);
  attention_fields(c, [&](const char* k, auto& v) {
    if (j.is_object() && j.contains(k)) read_json_field(j, k, v, where);
  });
  if (j.is_object() && j.contains("attention")) {
    std::string kernel;
    read_json_field(j, "attention", kernel, where);
    try {
      c.attention = attention_kernel_from_string(kernel);
    } catch (const Error&) {
      throw Error(where + ": key 'attention' is '" + brief(kernel) +
                  "' (expected standard, memory-efficient, sparse, linear or auto)");
    }
  }
  if (c.window < 1 || c.global_every < 1)
    throw Error(where + ": keys 'window' and 'global_every' must be >= 1, got " +
                std::to_string(c.window) + " and " + std::to_string(c.global_every));
  return c;
}

TensorFile read_model_file(const std::string& path, const char* want_kind) {
  TensorFile f = read_safetensors(path);
  const std::string kind = f.metadata.count("model_kind") ? f.metadata.at("model_kind") : "";
  if (kind.empty())
    throw Error(path +
                ": metadata has no 'model_kind': not a file written by nn::save_model or the "
                "training program");
  if (kind != want_kind)
    throw Error(path + ": holds a '" + brief(kind) + "' model, not a '" + want_kind + "' model");
  return f;
}

std::string prefix_of(const TensorFile& f) {
  auto it = f.metadata.find("model_prefix");
  return it == f.metadata.end() ? "" : it->second;
}

}  // namespace

json upgrade_model_config(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("max_len")) return j;
  if (j.contains("max_positions"))
    throw Error(where + ": holds both 'max_positions' and 'max_len', its old name");
  json up = j;
  up["max_positions"] = up["max_len"];
  up.erase("max_len");
  return up;
}

json config_to_json(const TransformerConfig& c) {
  return to_json_with(c, [](auto& cc, auto&& f) { transformer_fields(cc, f); });
}
json config_to_json(const GPTConfig& c) {
  return to_json_with(c, [](auto& cc, auto&& f) { gpt_fields(cc, f); });
}
TransformerConfig transformer_config_from_json(const json& j, const std::string& where) {
  return from_json_with<TransformerConfig>(j, where,
                                           [](auto& cc, auto&& f) { transformer_fields(cc, f); });
}
GPTConfig gpt_config_from_json(const json& j, const std::string& where) {
  return from_json_with<GPTConfig>(j, where, [](auto& cc, auto&& f) { gpt_fields(cc, f); });
}
json config_to_json(const EncoderOnlyConfig& c) {
  return to_json_with(c, [](auto& cc, auto&& f) { encoder_fields(cc, f); });
}
EncoderOnlyConfig encoder_config_from_json(const json& j, const std::string& where) {
  return from_json_with<EncoderOnlyConfig>(j, where,
                                           [](auto& cc, auto&& f) { encoder_fields(cc, f); });
}

// ---- the model families, one row each -------------------------------------------------
// How each family's configuration is written, and how a model is rebuilt from
// a file: the one place (with generation/answer.cpp) that names every family.
namespace {

// A family's model from a file: its config checked against the tensors
// before anything is allocated for the model, then built and loaded (build
// false: the check alone).
template <class M, class C>
std::unique_ptr<Model> rebuild(const TensorFile& f, const std::string& prefix, const C& c,
                               bool build) {
  check_config_fits(f, prefix, c);
  if (!build) return nullptr;
  auto m = std::make_unique<M>(c);
  load_state_dict(*m, f, prefix);
  return m;
}

struct Family {
  const char* kind;
  json (*config)(const Model&);
  std::unique_ptr<Model> (*load)(const TensorFile&, const std::string& prefix, const json& config,
                                 const std::string& where, bool build);
};

const Family kFamilies[] = {
    {"seq2seq",
     [](const Model& m) { return config_to_json(dynamic_cast<const Seq2SeqTransformer&>(m).cfg); },
     [](const TensorFile& f, const std::string& p, const json& j, const std::string& w, bool b) {
       return rebuild<Seq2SeqTransformer>(f, p, transformer_config_from_json(j, w), b);
     }},
    {"gpt", [](const Model& m) { return config_to_json(dynamic_cast<const GPT&>(m).cfg); },
     [](const TensorFile& f, const std::string& p, const json& j, const std::string& w, bool b) {
       return rebuild<GPT>(f, p, gpt_config_from_json(j, w), b);
     }},
    {"encoder",
     [](const Model& m) { return config_to_json(dynamic_cast<const EncoderOnlyModel&>(m).cfg); },
     [](const TensorFile& f, const std::string& p, const json& j, const std::string& w, bool b) {
       return rebuild<EncoderOnlyModel>(f, p, encoder_config_from_json(j, w), b);
     }},
};

const Family& family(const std::string& kind, const std::string& where) {
  for (const Family& f : kFamilies)
    if (kind == f.kind) return f;
  throw Error(where + ": unknown model kind '" + brief(kind) +
              "' (expected seq2seq, gpt or encoder)");
}

}  // namespace

json config_to_json(const Model& m) { return family(m.kind(), "config_to_json").config(m); }

Metadata model_metadata(const Model& m, const std::string& prefix) {
  return {{"model_kind", m.kind()},
          {"model_config", config_to_json(m).dump()},
          {"model_prefix", prefix}};
}

std::string special_tokens_json(const SpecialTokens& s) {
  json j = {{"pad", s.pad}, {"bos", s.bos}, {"eos", s.eos}};
  if (s.unk >= 0) j["unk"] = s.unk;
  return j.dump();
}

SpecialTokens special_tokens(const Metadata& md, const std::string& path) {
  SpecialTokens s;
  if (!md.count("special_tokens")) return s;
  const json j = metadata_json(md, "special_tokens", path);
  const std::string where = path + ": metadata 'special_tokens'";
  read_json_field(j, "pad", s.pad, where);
  read_json_field(j, "bos", s.bos, where);
  read_json_field(j, "eos", s.eos, where);
  if (j.contains("unk")) read_json_field(j, "unk", s.unk, where);
  for (const auto& [key, id] :
       {std::pair<const char*, int64_t>{"pad", s.pad}, {"bos", s.bos}, {"eos", s.eos}})
    if (id < 0)
      throw Error(where + ": key '" + key + "' is " + std::to_string(id) + " (a token id is >= 0)");
  return s;
}

void save_model(const Model& m, const std::string& path, const Metadata& extra) {
  Metadata md = extra;
  if (!md.count("special_tokens")) md["special_tokens"] = special_tokens_json(SpecialTokens{});
  for (auto& [k, v] : model_metadata(m)) md[k] = v;
  save(m, path, md);
}

json metadata_json(const Metadata& md, const std::string& key, const std::string& path) {
  auto it = md.find(key);
  if (it == md.end()) throw Error(path + ": metadata has no '" + brief(key) + "'");
  return parse_json_bounded(it->second, path + ": metadata '" + brief(key) + "'");
}

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

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 8e9;
}

// check_config_fits's reading of one file: each check names the file, the
// config key and the tensor it was compared with.
class ConfigFit {
 public:
  ConfigFit(const TensorFile& f, const std::string& prefix) : f_(f), prefix_(prefix) {}

  [[noreturn]] void fail(const std::string& msg) const { throw Error(f_.path + ": " + msg); }
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

  void dropout_ok(real p) const {
    if (!(p >= 0 && p < 1))
      fail("model_config key 'dropout' is " + number_text(double(p)) + ": must be in [0, 1)");
  }

  void heads_ok(int64_t heads, int64_t d_model) const {
    at_least("heads", heads, 1);
    if (d_model % heads != 0)
      fail(key_is("heads", heads) + ", which does not divide d_model " + std::to_string(d_model));
  }

  // The model holds every parameter in the file (load_state_dict is strict),
  // so one that would hold more numbers than the file is refused before it is
  // built: this bounds what a loader allocates by the file's size whatever
  // else the configuration says (say, a layer count met by one stray tensor).
  void count_fits(double model_numbers) const {
    double in_file = 0;
    for (const auto& [n, t] : f_.tensors)
      if (n.compare(0, prefix_.size(), prefix_) == 0) in_file += double(t.numel());
    if (model_numbers > in_file)
      fail("model_config describes a model of " + number_text(model_numbers) +
           " parameters but the file holds " + number_text(in_file) +
           " numbers under the prefix '" + brief(prefix_) + "'");
  }

 private:
  const TensorFile& f_;
  const std::string& prefix_;
};

// Numbers in one attention block (4 projections with biases), LayerNorm and FFN.
double attention_numbers(double D) { return 4 * (D * D + D); }
double norm_numbers(double D) { return 2 * D; }
double ffn_numbers(double D, double F) { return 2 * D * F + F + D; }

}  // namespace

double parameter_count(const TransformerConfig& c) {
  const double D = double(c.d_model), F = double(c.d_ff);
  const double enc_layer = attention_numbers(D) + 2 * norm_numbers(D) + ffn_numbers(D, F);
  const double dec_layer = 2 * attention_numbers(D) + 3 * norm_numbers(D) + ffn_numbers(D, F);
  double n = double(c.src_vocab) * D + double(c.tgt_vocab) * D;   // the embeddings
  if (c.learned_positions) n += 2 * double(c.max_positions) * D;  // src_pos, tgt_pos
  n += double(c.encoder_layers) * enc_layer + double(c.decoder_layers) * dec_layer;
  if (c.pre_norm) n += 2 * norm_numbers(D);                // each stack's final norm
  n += double(c.tgt_vocab) * (c.tie_weights ? 1 : D + 1);  // lm_head: bias (+ weight)
  return n;
}

double parameter_count(const GPTConfig& c) {
  const double D = double(c.d_model), F = double(c.d_ff);
  const double layer = attention_numbers(D) + 2 * norm_numbers(D) + ffn_numbers(D, F);
  double n = double(c.vocab) * D + double(c.max_positions) * D + double(c.layers) * layer;
  if (c.pre_norm) n += norm_numbers(D);
  if (!c.tie_weights) n += double(c.vocab) * D;  // lm_head, no bias
  return n;
}

double parameter_count(const EncoderOnlyConfig& c) {
  const double D = double(c.d_model), F = double(c.d_ff);
  const double layer = attention_numbers(D) + 2 * norm_numbers(D) + ffn_numbers(D, F);
  double n = double(c.vocab) * D + double(c.layers) * layer;
  if (c.pre_norm) n += norm_numbers(D);
  return n + double(c.classes) * (D + 1);  // head, with bias
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
  fit.at_least("d_ff", c.d_ff, 1);
  const Tensor& w1 = fit.matrix("encoder.layers.0.ffn.linear1.weight", "d_ff");
  fit.size_is("encoder.layers.0.ffn.linear1.weight", w1, 0, "d_ff", c.d_ff);  // (F, D)
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
  fit.at_least("d_ff", c.d_ff, 1);
  for (const char* name :
       {"encoder.layers.0.ffn.linear1.weight", "decoder.layers.0.ffn.linear1.weight"}) {
    const Tensor& w1 = fit.matrix(name, "d_ff");
    fit.size_is(name, w1, 0, "d_ff", c.d_ff);  // (F, D)
    fit.size_is(name, w1, 1, "d_model", c.d_model);
  }
  if (c.learned_positions) {
    for (const char* name : {"src_pos.weight", "tgt_pos.weight"}) {
      const Tensor& table = fit.matrix(name, "max_positions");
      fit.size_is(name, table, 0, "max_positions", c.max_positions);  // (max_positions, D)
      fit.size_is(name, table, 1, "d_model", c.d_model);
    }
  } else {
    // The sinusoidal table is computed, not read: bound it on its own.
    fit.at_least("max_positions", c.max_positions, 0);
    if (c.max_positions > kMaxSinusoidalPositions)
      fit.fail(ConfigFit::key_is("max_positions", c.max_positions) +
               ": a sinusoidal table of more than " + std::to_string(kMaxSinusoidalPositions) +
               " positions is refused");
    const double bytes = double(c.max_positions) * double(c.d_model) * sizeof(real);
    if (bytes > 0.5 * physical_memory_bytes())
      fit.fail(ConfigFit::key_is("max_positions", c.max_positions) +
               ": its sinusoidal table (max_positions x d_model " + std::to_string(c.d_model) +
               ") would take " + number_text(bytes / 1073741824.0) +
               " GiB, more than half of this machine's memory");
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
    fit.at_least("d_ff", c.d_ff, 1);
    const Tensor& w1 = fit.matrix("layers.0.ffn.linear1.weight", "d_ff");
    fit.size_is("layers.0.ffn.linear1.weight", w1, 0, "d_ff", c.d_ff);  // (F, D)
    fit.size_is("layers.0.ffn.linear1.weight", w1, 1, "d_model", c.d_model);
  }
  const Tensor& table = fit.matrix("pos_embed.weight", "max_positions");
  fit.size_is("pos_embed.weight", table, 0, "max_positions",
              c.max_positions);  // (max_positions, D)
  fit.size_is("pos_embed.weight", table, 1, "d_model", c.d_model);
  fit.dropout_ok(c.dropout);
  fit.count_fits(parameter_count(c));
}

// ---- loading ---------------------------------------------------------------------

namespace {
std::unique_ptr<Model> load_or_check(const TensorFile& f, bool build) {
  auto it = f.metadata.find("model_kind");
  if (it == f.metadata.end() || it->second.empty())
    throw Error(f.path +
                ": metadata has no 'model_kind': not a file written by nn::save_model or the "
                "training program");
  const Family& fam = family(it->second, f.path + ": metadata 'model_kind'");
  return fam.load(f, prefix_of(f), metadata_json(f.metadata, "model_config", f.path),
                  f.path + ": metadata 'model_config'", build);
}
}  // namespace

void check_config_fits(const TensorFile& f) { load_or_check(f, false); }
std::unique_ptr<Model> load_model(const TensorFile& f) { return load_or_check(f, true); }

std::unique_ptr<Model> load_model(const std::string& path) {
  return load_model(read_safetensors(path));
}

namespace {
template <class M>
std::unique_ptr<M> load_as(const std::string& path, const char* want_kind) {
  const TensorFile f = read_model_file(path, want_kind);
  std::unique_ptr<Model> m = load_model(f);
  return std::unique_ptr<M>(static_cast<M*>(m.release()));  // the kind was checked
}
}  // namespace

std::unique_ptr<Seq2SeqTransformer> load_seq2seq(const std::string& path) {
  return load_as<Seq2SeqTransformer>(path, "seq2seq");
}
std::unique_ptr<GPT> load_gpt(const std::string& path) { return load_as<GPT>(path, "gpt"); }
std::unique_ptr<EncoderOnlyModel> load_encoder_only(const std::string& path) {
  return load_as<EncoderOnlyModel>(path, "encoder");
}

std::string model_kind(const std::string& path) {
  TensorFile f = read_safetensors(path);
  auto it = f.metadata.find("model_kind");
  if (it == f.metadata.end()) throw Error(path + ": metadata has no 'model_kind'");
  return it->second;
}

}  // namespace qkv::nn
