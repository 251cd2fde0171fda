// The Vision Transformer's model files (models/vit.h): its model_config in
// JSON, its checks against a file's tensors, and its typed loader.
// nn::save_model and nn::load_model handle a ViT as any other family (kind "vit").
//
//   nn::save_model(vit, "vit.safetensors");
//   std::unique_ptr<nn::ViT> v = nn::load_vit("vit.safetensors");
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "checkpoint/model_file.h"
#include "models/vit.h"

namespace qkv::nn {

nlohmann::json config_to_json(const ViTConfig& c);
ViTConfig vit_config_from_json(const nlohmann::json& j, const std::string& where);
// As check_config_fits of model_file.h, for a ViT (checkpoint/config_fits.cpp):
// d_model and the patch geometry against patch.weight (D, C*P*P) and
// pos_embed ((image/patch)^2 + 1, D), classes against head.weight.
void check_config_fits(const TensorFile& f, const std::string& prefix, const ViTConfig& c);
double parameter_count(const ViTConfig& c);
// The ViT a file holds; Error naming the file when it holds another family.
std::unique_ptr<ViT> load_vit(const std::string& path);

}  // namespace qkv::nn
