// How the Vision Transformer (models/vit.h) is written to and read from a model file: its
// model_config fields and its row of the codec table (nn::ModelCodec,
// checkpoint/model_file.h). Its shape checks are check_config_fits
// (checkpoint/config_fits.cpp).
#include "checkpoint/config_json.h"
#include "checkpoint/vit_codec.h"

namespace qkv::nn {

using json = nlohmann::json;

namespace {

// Visits every field of the config with its JSON key, so that writing and
// reading cannot drift apart; the keys every family shares are written around
// them (checkpoint/config_json.h).
template <class C, class F>
void vit_fields(C& c, F&& f) {
  f("image", c.image);
  f("channels", c.channels);
  f("patch", c.patch);
  f("classes", c.classes);
  f("d_model", c.d_model);
  f("heads", c.heads);
  f("layers", c.layers);
  f("d_ff", c.d_ff);
  f("dropout", c.dropout);
  f("pre_norm", c.pre_norm);
  f("seed", c.seed);
}

}  // namespace

json config_to_json(const ViTConfig& c) {
  return detail::to_json_with(c, [](auto& cc, auto&& f) { vit_fields(cc, f); });
}
ViTConfig vit_config_from_json(const json& j, const std::string& where) {
  return detail::from_json_with<ViTConfig>(j, where, [](auto& cc, auto&& f) { vit_fields(cc, f); });
}

extern const ModelCodec kViTCodec = {
    "vit", [](const Model& m) { return config_to_json(dynamic_cast<const ViT&>(m).cfg); },
    [](const TensorFile& f, const std::string& p, const nlohmann::json& j, const std::string& w,
       bool b) { return rebuild_model<ViT>(f, p, vit_config_from_json(j, w), b); }};

std::unique_ptr<ViT> load_vit(const std::string& path) {
  return load_model_as<ViT>(path, kViTCodec.kind);
}

}  // namespace qkv::nn
