// The glue every family's codec (checkpoint/<family>_codec.cpp) shares, so
// that a codec is its field list and a few lines:
//
//   to_json_with, from_json_with   the model_config JSON: the keys all families
//                                  share (the activation, the attention
//                                  settings, d_k, the norm, the biases,
//                                  grouped-query attention, rotary and
//                                  relative positions, experts:
//                                  models/encoder_decoder.h's AttentionSettings)
//                                  written and read around the family's own
//   model_codec                    its row of the codec table (nn::ModelCodec)
//
// A family's field list is one generic lambda that visits every field of its
// config with its JSON key, so that writing and reading cannot drift apart:
//
//   constexpr auto gpt_fields = [](auto& c, auto&& f) {
//     f("vocab", c.vocab);  f("d_model", c.d_model);  ...
//   };
//   json config_to_json(const GPTConfig& c) { return detail::to_json_with(c, gpt_fields); }
//   GPTConfig gpt_config_from_json(const json& j, const std::string& where) {
//     return detail::from_json_with<GPTConfig>(j, where, gpt_fields);
//   }
//   extern const ModelCodec kGPTCodec = detail::model_codec<GPT, gpt_config_from_json>("gpt");
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/model_file.h"
#include "core/error.h"
#include "io/json_bounded.h"

namespace qkv::nn::detail {

using json = nlohmann::json;

inline Activation parse_activation(const std::string& s, const std::string& where) {
  if (const ActivationKind* k = find_activation(s)) return k->act;
  throw Error(where + ": key 'activation' is '" + brief(s) + "' (expected " + activation_names() +
              ")");
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

// A field list of no fields: a family whose every key is required.
inline constexpr auto no_fields = [](auto&, auto&&) {};

// The fields of one stack of blocks, as the encoder-only families (encoder,
// bert, vit) list them after their own: their field lists end with it.
inline constexpr auto stack_fields = [](auto& c, auto&& f) {
  f("d_model", c.d_model);
  f("heads", c.heads);
  f("layers", c.layers);
  f("d_ff", c.d_ff);
  f("dropout", c.dropout);
  f("pre_norm", c.pre_norm);
  f("seed", c.seed);
};

// The family's fields (`fields`, then the `optional` ones: every one written)
// and the keys every family shares, as one JSON object.
template <class C, class Fields, class Optional = decltype(no_fields)>
json to_json_with(const C& c, Fields fields, Optional optional = no_fields) {
  json j;
  fields(c, [&](const char* k, const auto& v) { j[k] = v; });
  optional(c, [&](const char* k, const auto& v) { j[k] = v; });
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
  // T5's relative positions, written only when used (a file without them has
  // none: every file written before the keys).
  if (c.rel_buckets != 0) {
    j["rel_buckets"] = c.rel_buckets;
    j["rel_max_distance"] = c.rel_max_distance;
  }
  // A mixture of experts in every FFN (nn/moe.h), written only when used (a
  // file without "experts", as every file before it, has dense FFNs).
  if (c.moe.experts > 0) {
    j["experts"] = c.moe.experts;
    j["experts_per_token"] = c.moe.experts_per_token;
    j["capacity_factor"] = c.moe.capacity_factor;
    j["aux_loss"] = c.moe.aux_loss;
  }
  return j;
}

// The config a model_config holds (upgrade_model_config'd first): each of
// `fields` required, with its JSON type; the shared keys read and checked;
// then the `optional` fields, each read when present (a file without one
// keeps C's default). Errors name `where` and the key.
template <class C, class Fields, class Optional = decltype(no_fields)>
C from_json_with(const json& file_json, const std::string& where, Fields fields,
                 Optional optional = no_fields) {
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
                  norm_kinds().names() + ")");
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
    if (!(c.rope_base > 1 && c.rope_base <= real(1e9)))
      throw Error(where + ": key 'rope_base' is " + brief(j.at("rope_base").dump()) +
                  ": must be in (1, 1e9] (leave it out for no rotation)");
  }
  if (j.is_object() && j.contains("rel_buckets")) {
    read_json_field(j, "rel_buckets", c.rel_buckets, where);
    if (j.contains("rel_max_distance"))
      read_json_field(j, "rel_max_distance", c.rel_max_distance, where);
    if (c.rel_buckets < 4 || c.rel_buckets % 2 != 0)
      throw Error(where + ": key 'rel_buckets' is " + std::to_string(c.rel_buckets) +
                  ": must be even and >= 4 (leave it out for no relative positions)");
    if (c.rel_max_distance <= c.rel_buckets / 2 || c.rel_max_distance > (int64_t{1} << 30))
      throw Error(where + ": key 'rel_max_distance' is " + std::to_string(c.rel_max_distance) +
                  ": must exceed rel_buckets / 2 = " + std::to_string(c.rel_buckets / 2) +
                  " and be at most 2^30");
  } else if (j.is_object() && j.contains("rel_max_distance")) {
    throw Error(where + ": key 'rel_max_distance' without 'rel_buckets'");
  }
  // One kind of positions a file: the trainer's runs have one (it rebuilt
  // such a file without its rotation, so its answers were those without
  // it, while this library rotated); a file holding both is refused here,
  // for the library and the trainer alike.
  if (c.rope_base != 0 && c.rel_buckets > 0)
    throw Error(where + ": key 'rope_base': this file's positions are T5's relative bias " +
                "('rel_buckets'); a file has one kind of positions (leave one of them out)");
  if (j.is_object() && j.contains("experts")) {
    read_json_field(j, "experts", c.moe.experts, where);
    for (const char* k : {"experts_per_token", "capacity_factor", "aux_loss"})
      if (!j.contains(k))
        throw Error(where + ": key 'experts' without '" + k +
                    "' (a mixture of experts has all four)");
    read_json_field(j, "experts_per_token", c.moe.experts_per_token, where);
    read_json_field(j, "capacity_factor", c.moe.capacity_factor, where);
    read_json_field(j, "aux_loss", c.moe.aux_loss, where);
    const std::string problem = moe_settings_problem(c.moe);
    if (!problem.empty())
      throw Error(where +
                  ": keys 'experts', 'experts_per_token', 'capacity_factor', "
                  "'aux_loss': " +
                  problem);
  } else {
    for (const char* k : {"experts_per_token", "capacity_factor", "aux_loss"})
      if (j.is_object() && j.contains(k))
        throw Error(where + ": key '" + k + "' without 'experts' (leave it out for a dense FFN)");
  }
  // The values nn::MultiHeadAttention takes (nn/attention.h): global_every 0
  // is sparse attention without global positions.
  if (c.window < 1 || c.global_every < 0)
    throw Error(where + ": key 'window' must be >= 1 and 'global_every' >= 0, got " +
                std::to_string(c.window) + " and " + std::to_string(c.global_every));
  optional(c, [&](const char* k, auto& v) {
    if (j.contains(k)) read_json_field(j, k, v, where);
  });
  return c;
}

// rope_base in the file of a family without rotary positions, refused by
// name (its model refuses it too): `positions` says what the family reads
// instead. One rule for the library and the trainer.
inline void refuse_rope_base(const AttentionSettings& c, const std::string& where,
                             const std::string& positions) {
  if (c.rope_base != 0)
    throw Error(where + ": key 'rope_base': " + positions +
                "; rotary positions are a gpt's (leave the key out)");
}

// A family's row of the codec table (nn::ModelCodec, model_file.h), for a
// model class M holding its config as `cfg` and the family's config reader:
// its model_config is config_to_json(m.cfg) (the family's overload), and a
// file's model is rebuild_model<M> of the config read from it. constexpr: a
// codec defined with it is constant-initialized, ready before any code runs.
template <class M, auto config_from_json>
constexpr ModelCodec model_codec(const char* kind) {
  return {
      kind, [](const Model& m) { return config_to_json(dynamic_cast<const M&>(m).cfg); },
      [](const TensorFile& f, const std::string& prefix, const json& j, const std::string& where,
         bool build) { return rebuild_model<M>(f, prefix, config_from_json(j, where), build); }};
}

}  // namespace qkv::nn::detail
