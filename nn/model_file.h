// Self-describing model files: a checkpoint that carries the model's
// configuration, so that it can be rebuilt from the file alone.
//
//   nn::save_model(model, "m.safetensors");            // weights + config
//   auto m = nn::load_seq2seq("m.safetensors");         // no settings retyped
//   auto g = nn::load_gpt("runs/lm/model.safetensors"); // also reads train's checkpoints
//
// The configuration is stored as JSON in the safetensors metadata under
// "model_kind" ("seq2seq" or "gpt") and "model_config"; "model_prefix" names
// the prefix of the weights in the file ("" for save_model, "model." for the
// training program's checkpoints, which also hold the optimizer state).
#pragma once
#include <memory>
#include <string>

#include <cstdint>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/checkpoint.h"
#include "nn/encoder_decoder.h"
#include "nn/gpt.h"

namespace qkv::nn {

nlohmann::json config_to_json(const TransformerConfig& c);
nlohmann::json config_to_json(const GPTConfig& c);
// Strict: every field must be present with the right JSON type; an Error names
// `where` (the file) and the key otherwise.
TransformerConfig transformer_config_from_json(const nlohmann::json& j, const std::string& where);
GPTConfig gpt_config_from_json(const nlohmann::json& j, const std::string& where);

// The metadata keys above for a model (merge them into your own metadata).
Metadata model_metadata(const Seq2SeqTransformer& m, const std::string& prefix = "");
Metadata model_metadata(const GPT& m, const std::string& prefix = "");

// Weights and configuration in one file (atomic, as nn::save), plus `extra` metadata.
void save_model(const Seq2SeqTransformer& m, const std::string& path, const Metadata& extra = {});
void save_model(const GPT& m, const std::string& path, const Metadata& extra = {});

// Rebuilds the model from a file written by save_model or by the training
// program. Errors name the file and the key (missing config, wrong kind,
// mistyped field) or the tensor (missing, wrong shape).
std::unique_ptr<Seq2SeqTransformer> load_seq2seq(const std::string& path);
std::unique_ptr<GPT> load_gpt(const std::string& path);
// "seq2seq" or "gpt": what kind of model a file holds.
std::string model_kind(const std::string& path);

// The metadata value of `key`, parsed as JSON; an Error naming the file and the
// key when it is missing or is not valid JSON.
nlohmann::json metadata_json(const Metadata& md, const std::string& key, const std::string& path);

// Reads one field of a JSON object strictly (used for every config above).
template <class T>
void read_json_field(const nlohmann::json& j, const char* key, T& out, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": expected a JSON object holding '" + key + "'");
  auto it = j.find(key);
  if (it == j.end()) throw Error(where + ": missing key '" + key + "'");
  bool ok;
  if constexpr (std::is_same_v<T, bool>) ok = it->is_boolean();
  else if constexpr (std::is_integral_v<T>) ok = it->is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) ok = it->is_number();
  else ok = it->is_string();
  if (!ok) throw Error(where + ": key '" + key + "' has the wrong type (" + it->dump() + ")");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const bool negative = !it->is_number_unsigned();  // nlohmann keeps non-negative integers unsigned
    const bool fits = std::is_unsigned_v<T> ? !negative : negative || it->template get<uint64_t>() <= uint64_t(INT64_MAX);
    if (!fits) throw Error(where + ": key '" + key + "' is out of range (" + it->dump() + ")");
  }
  out = it->template get<T>();
}

}  // namespace qkv::nn
