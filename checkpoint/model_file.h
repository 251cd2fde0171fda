// Self-describing model files: a checkpoint that carries the model's
// configuration, so that it can be rebuilt from the file alone.
//
//   nn::save_model(model, "m.safetensors");            // weights + config, any family
//   auto m = nn::load_model("m.safetensors");           // a Model of the file's family
//   auto s = nn::load_seq2seq("m.safetensors");         // or typed: load_gpt, load_encoder_only,
//                                                       // load_bert (checkpoint/bert_codec.h),
//                                                       // load_vit (checkpoint/vit_codec.h)
//   auto g = nn::load_gpt("runs/lm/model.safetensors"); // also reads train's checkpoints
//
// Which way to write a model to a file:
//   nn::save_model   a model you will load again (here or in Python): weights,
//                    config and special tokens; THE way for a whole model
//   Trainer::save    a training run (model + optimizer + data + random streams),
//                    written by the train program; load_model reads its model too
//   nn::save         a Module's parameters only (a part of a model, or your own
//                    Module): you rebuild the Module yourself before nn::load
//   write_safetensors  raw named tensors (io/), for tools and tests
//
// The configuration is stored as JSON in the safetensors metadata under
// "model_kind" ("seq2seq", "gpt", "encoder", "bert" or "vit") and "model_config"; "model_prefix"
// names the prefix of the weights in the file ("" for save_model, "model." for the training
// program's checkpoints, which also hold the optimizer state).
#pragma once
#include <memory>
#include <string>

#include <cstdint>
#include <type_traits>

#include <nlohmann/json_fwd.hpp>

#include "core/error.h"
#include "checkpoint/checkpoint.h"
#include "models/encoder_decoder.h"
#include "models/encoder_only.h"
#include "models/gpt.h"
#include "models/model.h"

namespace qkv::nn {

nlohmann::json config_to_json(const TransformerConfig& c);
nlohmann::json config_to_json(const GPTConfig& c);
// Strict: every field must be present with the right JSON type; an Error names
// `where` (the file) and the key otherwise.
TransformerConfig transformer_config_from_json(const nlohmann::json& j, const std::string& where);
GPTConfig gpt_config_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json config_to_json(const EncoderOnlyConfig& c);
EncoderOnlyConfig encoder_config_from_json(const nlohmann::json& j, const std::string& where);
// A model_config as a file holds it, in today's names: files written before
// the rename call the position table's size "max_len" (now "max_positions").
nlohmann::json upgrade_model_config(const nlohmann::json& j, const std::string& where);
// Any model's configuration, as its family writes it.
nlohmann::json config_to_json(const Model& m);

// The metadata keys above for a model (merge them into your own metadata).
Metadata model_metadata(const Model& m, const std::string& prefix = "");

// Weights and configuration in one file (atomic, as nn::save), plus `extra` metadata.
// The special token ids a model was trained with travel in its file
// ("special_tokens": {"pad": 0, "bos": 1, "eos": 2}, and "unk" when the
// vocabulary has one), so a program that loads it decodes with the right ids:
//   nn::SpecialTokens sp = nn::special_tokens(md, path);
//   opt.bos = sp.bos; opt.eos = sp.eos; opt.pad = sp.pad;   // nn::DecodeOptions
// save_model writes the decoders' defaults (0, 1, 2) unless `extra` gives its own.
struct SpecialTokens {
  int64_t pad = 0, bos = 1, eos = 2;
  int64_t unk = -1;  // -1: the vocabulary has no <unk>
};
std::string special_tokens_json(const SpecialTokens& s);
// The file's special tokens; the defaults when it has none. Error naming the
// file and the key for anything else than non-negative integer ids.
SpecialTokens special_tokens(const Metadata& md, const std::string& path);

void save_model(const Model& m, const std::string& path, const Metadata& extra = {});

// A family's config codec, found by its kind() (the files' "model_kind"): its
// model_config from a model, and the model rebuilt from a file (its config
// read strictly, checked against the file's tensors before anything is
// allocated; build false: the check alone). The built-in families' rows are
// in model_file.cpp; a program's own family adds its row with
// register_model_codec (which throws when the kind has one).
struct ModelCodec {
  const char* kind;
  nlohmann::json (*config)(const Model& m);
  std::unique_ptr<Model> (*load)(const TensorFile& f, const std::string& prefix,
                                 const nlohmann::json& config, const std::string& where,
                                 bool build);
};
void register_model_codec(const ModelCodec& c);
void unregister_model_codec(const std::string& kind);  // removes a registered row
// A codec's load for a family whose model M is built from its config C:
// check_config_fits(f, prefix, c) (an overload for C), then, with build, the
// model and its tensors.
template <class M, class C>
std::unique_ptr<Model> rebuild_model(const TensorFile& f, const std::string& prefix, const C& c,
                                     bool build) {
  check_config_fits(f, prefix, c);
  if (!build) return nullptr;
  auto m = std::make_unique<M>(c);
  load_state_dict(*m, f, prefix);
  return m;
}

// Rebuilds the model from a file written by save_model or by the training
// program. Errors name the file and the key (missing config, unknown or wrong
// kind, mistyped field) or the tensor (missing, wrong shape).
std::unique_ptr<Model> load_model(const std::string& path);
std::unique_ptr<Model> load_model(const TensorFile& f);  // a file already read
std::unique_ptr<Seq2SeqTransformer> load_seq2seq(const std::string& path);
std::unique_ptr<GPT> load_gpt(const std::string& path);
std::unique_ptr<EncoderOnlyModel> load_encoder_only(const std::string& path);
// A file's tensors, once its model_kind is `want_kind` (an Error naming the
// file otherwise), and the model it holds as its own class M: the typed
// loaders of the families in their own files (load_bert, load_vit).
TensorFile read_model_file(const std::string& path, const char* want_kind);
template <class M>
std::unique_ptr<M> load_model_as(const std::string& path, const char* want_kind) {
  std::unique_ptr<Model> m = load_model(read_model_file(path, want_kind));
  return std::unique_ptr<M>(static_cast<M*>(m.release()));  // the kind was checked
}
// "seq2seq", "gpt", "encoder", "bert" or "vit": what kind of model a file holds.
std::string model_kind(const std::string& path);

// Refuses, before any model is built, a configuration whose sizes disagree
// with the tensors of `f` named `prefix` + parameter name, so that a file
// cannot make a loader allocate more than the tensors it holds:
//   d_model and the vocabulary sizes against the token embeddings, heads
//   against d_model (it must divide it), d_ff against each stack's first FFN
//   weight, the layer counts against the layer indices in the tensor names,
//   max_positions against the learned position tables (sinusoidal: >= 0; the
//   table is computed as needed), dropout
//   in [0, 1), and the number of parameters the configuration implies against
//   the numbers the file holds under `prefix`.
// The Error names the file and the key:
//   "m.safetensors: model_config key 'd_model' is 20000 but tensor
//    'model.src_embed.weight' has shape (13,64)"
// load_seq2seq and load_gpt call it; so can any program that builds a model
// from a file's configuration.
void check_config_fits(const TensorFile& f, const std::string& prefix, const TransformerConfig& c);
void check_config_fits(const TensorFile& f, const std::string& prefix, const GPTConfig& c);
void check_config_fits(const TensorFile& f, const std::string& prefix, const EncoderOnlyConfig& c);
// The same for whatever model a file holds (its model_kind, model_config, model_prefix).
void check_config_fits(const TensorFile& f);
// How many numbers (parameters) a model of this configuration holds, as
// named_parameters() counts them (tied weights once). A double: a hostile
// configuration may describe more than 2^63.
double parameter_count(const TransformerConfig& c);
double parameter_count(const GPTConfig& c);
double parameter_count(const EncoderOnlyConfig& c);

// The metadata value of `key`, parsed as JSON with its nesting bounded
// (parse_json_bounded, io/json_bounded.h); an Error naming the file and the
// key when it is missing, is not valid JSON or nests too deep.
nlohmann::json metadata_json(const Metadata& md, const std::string& key, const std::string& path);

// Reads one field of a JSON object strictly (used for every config above).
// Errors quote the value brief (core/error.h), however large it is.
// Defined for bool, int, int64_t, uint64_t, float, double and std::string
// (checkpoint/model_file.cpp).
template <class T>
void read_json_field(const nlohmann::json& j, const char* key, T& out, const std::string& where);

}  // namespace qkv::nn
