#include "nn/model_file.h"

#include "core/error.h"

namespace qkv::nn {

using json = nlohmann::json;

namespace {

Activation parse_activation(const std::string& s, const std::string& where) {
  if (s == "relu") return Activation::ReLU;
  if (s == "gelu") return Activation::GELU;
  throw Error(where + ": key 'activation' is '" + s + "' (expected relu or gelu)");
}

// Visits every field of a config with its JSON key, so writing and reading
// cannot drift apart. Activation is stored by name.
template <class C, class F>
void transformer_fields(C& c, F&& f) {
  f("src_vocab", c.src_vocab); f("tgt_vocab", c.tgt_vocab); f("d_model", c.d_model); f("heads", c.heads);
  f("encoder_layers", c.encoder_layers); f("decoder_layers", c.decoder_layers); f("d_ff", c.d_ff);
  f("dropout", c.dropout); f("pre_norm", c.pre_norm); f("tie_weights", c.tie_weights);
  f("learned_positions", c.learned_positions); f("max_len", c.max_len); f("seed", c.seed);
}
template <class C, class F>
void gpt_fields(C& c, F&& f) {
  f("vocab", c.vocab); f("d_model", c.d_model); f("heads", c.heads); f("layers", c.layers); f("d_ff", c.d_ff);
  f("max_len", c.max_len); f("dropout", c.dropout); f("pre_norm", c.pre_norm); f("tie_weights", c.tie_weights);
  f("seed", c.seed);
}

template <class C, class Fields>
json to_json_with(const C& c, Fields fields) {
  json j;
  fields(c, [&](const char* k, const auto& v) { j[k] = v; });
  j["activation"] = activation_name(c.activation);
  return j;
}

template <class C, class Fields>
C from_json_with(const json& j, const std::string& where, Fields fields) {
  C c;
  fields(c, [&](const char* k, auto& v) { read_json_field(j, k, v, where); });
  std::string act;
  read_json_field(j, "activation", act, where);
  c.activation = parse_activation(act, where);
  return c;
}

TensorFile read_model_file(const std::string& path, const char* want_kind) {
  TensorFile f = read_safetensors(path);
  const std::string kind = f.metadata.count("model_kind") ? f.metadata.at("model_kind") : "";
  if (kind.empty())
    throw Error(path + ": metadata has no 'model_kind': not a file written by nn::save_model or the training program");
  if (kind != want_kind)
    throw Error(path + ": holds a '" + kind + "' model, not a '" + want_kind + "' model");
  return f;
}

std::string prefix_of(const TensorFile& f) {
  auto it = f.metadata.find("model_prefix");
  return it == f.metadata.end() ? "" : it->second;
}

}  // namespace

json config_to_json(const TransformerConfig& c) {
  return to_json_with(c, [](auto& cc, auto&& f) { transformer_fields(cc, f); });
}
json config_to_json(const GPTConfig& c) {
  return to_json_with(c, [](auto& cc, auto&& f) { gpt_fields(cc, f); });
}
TransformerConfig transformer_config_from_json(const json& j, const std::string& where) {
  return from_json_with<TransformerConfig>(j, where, [](auto& cc, auto&& f) { transformer_fields(cc, f); });
}
GPTConfig gpt_config_from_json(const json& j, const std::string& where) {
  return from_json_with<GPTConfig>(j, where, [](auto& cc, auto&& f) { gpt_fields(cc, f); });
}

Metadata model_metadata(const Seq2SeqTransformer& m, const std::string& prefix) {
  return {{"model_kind", "seq2seq"}, {"model_config", config_to_json(m.cfg).dump()}, {"model_prefix", prefix}};
}
Metadata model_metadata(const GPT& m, const std::string& prefix) {
  return {{"model_kind", "gpt"}, {"model_config", config_to_json(m.cfg).dump()}, {"model_prefix", prefix}};
}

void save_model(const Seq2SeqTransformer& m, const std::string& path, const Metadata& extra) {
  Metadata md = extra;
  for (auto& [k, v] : model_metadata(m)) md[k] = v;
  save(m, path, md);
}
void save_model(const GPT& m, const std::string& path, const Metadata& extra) {
  Metadata md = extra;
  for (auto& [k, v] : model_metadata(m)) md[k] = v;
  save(m, path, md);
}

json metadata_json(const Metadata& md, const std::string& key, const std::string& path) {
  auto it = md.find(key);
  if (it == md.end()) throw Error(path + ": metadata has no '" + key + "'");
  try {
    return json::parse(it->second);
  } catch (const json::exception& e) {
    throw Error(path + ": metadata '" + key + "' is not valid JSON (" + e.what() + ")");
  }
}

std::unique_ptr<Seq2SeqTransformer> load_seq2seq(const std::string& path) {
  TensorFile f = read_model_file(path, "seq2seq");
  auto m = std::make_unique<Seq2SeqTransformer>(
      transformer_config_from_json(metadata_json(f.metadata, "model_config", path), path + ": model_config"));
  load_state_dict(*m, f, prefix_of(f));
  return m;
}

std::unique_ptr<GPT> load_gpt(const std::string& path) {
  TensorFile f = read_model_file(path, "gpt");
  auto m = std::make_unique<GPT>(gpt_config_from_json(metadata_json(f.metadata, "model_config", path), path + ": model_config"));
  load_state_dict(*m, f, prefix_of(f));
  return m;
}

std::string model_kind(const std::string& path) {
  TensorFile f = read_safetensors(path);
  auto it = f.metadata.find("model_kind");
  if (it == f.metadata.end()) throw Error(path + ": metadata has no 'model_kind'");
  return it->second;
}

}  // namespace qkv::nn
