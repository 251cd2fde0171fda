// BERT's model files (models/bert.h): its model_config in JSON, its checks
// against a file's tensors, and its typed loader. nn::save_model and
// nn::load_model handle a Bert as any other family (kind "bert").
//
//   nn::save_model(bert, "bert.safetensors");
//   std::unique_ptr<nn::Bert> b = nn::load_bert("bert.safetensors");
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "checkpoint/model_file.h"
#include "models/bert.h"

namespace qkv::nn {

// model_config: vocab, max_positions, head, d_model, heads, layers, d_ff,
// dropout, pre_norm, seed (required), segments (2), classes (0), sep_id (2),
// mask_id (3) (optional, their defaults), and the keys every family shares.
nlohmann::json config_to_json(const BertConfig& c);
BertConfig bert_config_from_json(const nlohmann::json& j, const std::string& where);
// As check_config_fits of model_file.h, for a Bert (checkpoint/config_fits.cpp).
void check_config_fits(const TensorFile& f, const std::string& prefix, const BertConfig& c);
double parameter_count(const BertConfig& c);
// The Bert a file holds; Error naming the file when it holds another family.
std::unique_ptr<Bert> load_bert(const std::string& path);

}  // namespace qkv::nn
