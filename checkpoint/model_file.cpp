#include "checkpoint/model_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "checkpoint/config_json.h"
#include "core/error.h"
#include "core/registry.h"
#include "io/json_bounded.h"

namespace qkv::nn {

using json = nlohmann::json;

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

namespace {

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

// Each built-in family's codec, defined in its own file.
extern const ModelCodec kSeq2SeqCodec;  // checkpoint/seq2seq_codec.cpp
extern const ModelCodec kGPTCodec;      // checkpoint/gpt_codec.cpp
extern const ModelCodec kEncoderCodec;  // checkpoint/encoder_codec.cpp
extern const ModelCodec kViTCodec;      // checkpoint/vit_codec.cpp
extern const ModelCodec kBertCodec;     // checkpoint/bert_codec.cpp

// ---- the model families, one row each -------------------------------------------------
// How each family's configuration is written, and how a model is rebuilt from
// a file (ModelCodec, model_file.h): one row per built-in family; a program's
// own family adds its row with register_model_codec.
namespace {

Registry<ModelCodec, &ModelCodec::kind>& codecs() {
  static Registry<ModelCodec, &ModelCodec::kind> t{
      "register_model_codec", {kSeq2SeqCodec, kGPTCodec, kEncoderCodec, kBertCodec, kViTCodec}};
  return t;
}

const ModelCodec& family(const std::string& kind, const std::string& where) {
  if (const ModelCodec* f = codecs().find(kind)) return *f;
  throw Error(where + ": unknown model kind '" + brief(kind) + "' (expected " + codecs().names() +
              ")");
}

}  // namespace

void unregister_model_codec(const std::string& kind) { codecs().remove(kind); }

void register_model_codec(const ModelCodec& c) { codecs().add(c); }

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

std::unique_ptr<Seq2SeqTransformer> load_seq2seq(const std::string& path) {
  return load_model_as<Seq2SeqTransformer>(path, "seq2seq");
}
std::unique_ptr<GPT> load_gpt(const std::string& path) { return load_model_as<GPT>(path, "gpt"); }
std::unique_ptr<EncoderOnlyModel> load_encoder_only(const std::string& path) {
  return load_model_as<EncoderOnlyModel>(path, "encoder");
}

std::string model_kind(const std::string& path) {
  TensorFile f = read_safetensors(path);
  auto it = f.metadata.find("model_kind");
  if (it == f.metadata.end()) throw Error(brief(path) + ": metadata has no 'model_kind'");
  return it->second;
}

template <class T>
void read_json_field(const nlohmann::json& j, const char* key, T& out, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": expected a JSON object holding '" + key + "'");
  auto it = j.find(key);
  if (it == j.end()) throw Error(where + ": missing key '" + key + "'");
  const auto quoted = [&] {
    return brief(it->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  };
  bool ok;
  const char* want;
  if constexpr (std::is_same_v<T, bool>) {
    ok = it->is_boolean();
    want = "a boolean";
  } else if constexpr (std::is_integral_v<T>) {
    ok = it->is_number_integer();
    want = "an integer";
  } else if constexpr (std::is_floating_point_v<T>) {
    ok = it->is_number();
    want = "a number";
  } else {
    ok = it->is_string();
    want = "a string";
  }
  if (!ok)
    throw Error(where + ": key '" + key + "' has the wrong type (expected " + want + ", got " +
                it->type_name() + " " + quoted() + ")");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const bool negative =
        !it->is_number_unsigned();  // nlohmann keeps non-negative integers unsigned
    const bool fits = std::is_unsigned_v<T>
                          ? !negative
                          : negative || it->template get<uint64_t>() <= uint64_t(INT64_MAX);
    if (!fits) throw Error(where + ": key '" + key + "' is out of range (" + quoted() + ")");
  }
  out = it->template get<T>();
}

template void read_json_field<bool>(const nlohmann::json&, const char*, bool&, const std::string&);
template void read_json_field<int>(const nlohmann::json&, const char*, int&, const std::string&);
template void read_json_field<int64_t>(const nlohmann::json&, const char*, int64_t&,
                                       const std::string&);
template void read_json_field<uint64_t>(const nlohmann::json&, const char*, uint64_t&,
                                        const std::string&);
template void read_json_field<float>(const nlohmann::json&, const char*, float&,
                                     const std::string&);
template void read_json_field<double>(const nlohmann::json&, const char*, double&,
                                      const std::string&);
template void read_json_field<std::string>(const nlohmann::json&, const char*, std::string&,
                                           const std::string&);

}  // namespace qkv::nn
