#include "checkpoint/model_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "io/json_bounded.h"

namespace qkv::nn {

using json = nlohmann::json;

namespace {

Activation parse_activation(const std::string& s, const std::string& where) {
  if (const ActivationKind* k = find_activation(s)) return k->act;
  throw Error(where + ": key 'activation' is '" + brief(s) + "' (expected " + activation_names() +
              ")");
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
  // The query/key head size, written only when set apart from d_model / heads
  // (a file without it, as every file before it existed, has d_k = d_model / heads).
  if (c.d_k != 0) j["d_k"] = c.d_k;
  // The norm's kind and the biases, written only when not the paper's (a
  // file without them, as every file before they existed, has LayerNorm and biases).
  const AttentionSettings paper;
  if (c.norm != paper.norm) j["norm"] = c.norm;
  if (c.bias != paper.bias) j["bias"] = c.bias;
  // Grouped-query attention's key/value heads and rotary positions' base,
  // written only when used (a file without them has every head and no rotation).
  if (c.kv_heads != 0) j["kv_heads"] = c.kv_heads;
  if (c.rope_base != 0) j["rope_base"] = c.rope_base;
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
  if (j.is_object() && j.contains("d_k")) {
    read_json_field(j, "d_k", c.d_k, where);
    if (c.d_k < 1)
      throw Error(where + ": key 'd_k' is " + std::to_string(c.d_k) +
                  ": must be >= 1 (leave it out for d_model / heads)");
  }
  if (j.is_object() && j.contains("norm")) {
    read_json_field(j, "norm", c.norm, where);
    if (!find_norm(c.norm))
      throw Error(where + ": key 'norm' is '" + brief(c.norm) + "' (expected " +
                  one_of(norm_kinds(), [](const NormKind& k) { return k.name; }) + ")");
  }
  if (j.is_object() && j.contains("bias")) read_json_field(j, "bias", c.bias, where);
  if (j.is_object() && j.contains("kv_heads")) {
    read_json_field(j, "kv_heads", c.kv_heads, where);
    if (c.kv_heads < 1 || c.heads < 1 || c.heads % c.kv_heads != 0)
      throw Error(where + ": key 'kv_heads' is " + std::to_string(c.kv_heads) +
                  ": must divide 'heads' " + std::to_string(c.heads) +
                  " (leave it out for every head)");
  }
  if (j.is_object() && j.contains("rope_base")) {
    read_json_field(j, "rope_base", c.rope_base, where);
    if (!(c.rope_base > 0 && c.rope_base <= real(1e9)))
      throw Error(where + ": key 'rope_base' is " + std::to_string(c.rope_base) +
                  ": must be in (0, 1e9] (leave it out for no rotation)");
  }
  // The values nn::MultiHeadAttention takes (nn/attention.h): global_every 0
  // is sparse attention without global positions.
  if (c.window < 1 || c.global_every < 0)
    throw Error(where + ": key 'window' must be >= 1 and 'global_every' >= 0, got " +
                std::to_string(c.window) + " and " + std::to_string(c.global_every));
  return c;
}

TensorFile read_model_file(const std::string& path, const char* want_kind) {
  TensorFile f = read_safetensors(path);
  const std::string kind = f.metadata.count("model_kind") ? f.metadata.at("model_kind") : "";
  if (kind.empty())
    throw Error(brief(path) +
                ": metadata has no 'model_kind': not a file written by nn::save_model or the "
                "training program");
  if (kind != want_kind)
    throw Error(brief(path) + ": holds a '" + brief(kind) + "' model, not a '" + want_kind +
                "' model");
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

// Each built-in family's codec, defined in its own file.
extern const ModelCodec kSeq2SeqCodec;  // checkpoint/seq2seq_codec.cpp
extern const ModelCodec kGPTCodec;      // checkpoint/gpt_codec.cpp
extern const ModelCodec kEncoderCodec;  // checkpoint/encoder_codec.cpp

// ---- the model families, one row each -------------------------------------------------
// How each family's configuration is written, and how a model is rebuilt from
// a file (ModelCodec, model_file.h): one row per built-in family; a program's
// own family adds its row with register_model_codec.
namespace {

std::vector<ModelCodec>& codecs() {
  static std::vector<ModelCodec> t = {kSeq2SeqCodec, kGPTCodec, kEncoderCodec};
  return t;
}

const ModelCodec& family(const std::string& kind, const std::string& where) {
  for (const ModelCodec& f : codecs())
    if (kind == f.kind) return f;
  throw Error(where + ": unknown model kind '" + brief(kind) + "' (expected " +
              one_of(codecs(), [](const ModelCodec& c) { return c.kind; }) + ")");
}

}  // namespace

void unregister_model_codec(const std::string& kind) {
  std::vector<ModelCodec>& t = codecs();
  t.erase(std::remove_if(t.begin(), t.end(), [&](const ModelCodec& c) { return kind == c.kind; }),
          t.end());
}

void register_model_codec(const ModelCodec& c) {
  for (const ModelCodec& f : codecs())
    if (std::string(c.kind) == f.kind)
      throw Error(std::string("register_model_codec: kind '") + c.kind + "' has one");
  codecs().push_back(c);
}

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
  const std::string where = brief(path) + ": metadata 'special_tokens'";
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
  if (it == md.end()) throw Error(brief(path) + ": metadata has no '" + brief(key) + "'");
  return parse_json_bounded(it->second, brief(path) + ": metadata '" + brief(key) + "'");
}

// ---- loading ---------------------------------------------------------------------

namespace {
std::unique_ptr<Model> load_or_check(const TensorFile& f, bool build) {
  auto it = f.metadata.find("model_kind");
  if (it == f.metadata.end() || it->second.empty())
    throw Error(brief(f.path) +
                ": metadata has no 'model_kind': not a file written by nn::save_model or the "
                "training program");
  const ModelCodec& fam = family(it->second, brief(f.path) + ": metadata 'model_kind'");
  return fam.load(f, prefix_of(f), metadata_json(f.metadata, "model_config", f.path),
                  brief(f.path) + ": metadata 'model_config'", build);
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
  if (it == f.metadata.end()) throw Error(brief(path) + ": metadata has no 'model_kind'");
  return it->second;
}

}  // namespace qkv::nn
