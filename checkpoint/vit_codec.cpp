// How the Vision Transformer (models/vit.h) is written to and read from a model file: its
// model_config fields and its row of the codec table (nn::ModelCodec,
// checkpoint/model_file.h). Its shape checks are check_config_fits
// (checkpoint/config_fits.cpp).
#include "checkpoint/config_json.h"
#include "checkpoint/vit_codec.h"

namespace qkv::nn {

namespace {

// Every field of the config with its JSON key, so that writing and reading
// cannot drift apart; the keys every family shares are written around them
// (checkpoint/config_json.h).
constexpr auto vit_fields = [](auto& c, auto&& f) {
  f("image", c.image);
  f("channels", c.channels);
  f("patch", c.patch);
  f("classes", c.classes);
  detail::stack_fields(c, f);  // d_model, heads, layers, d_ff, dropout, pre_norm, seed
};

}  // namespace

nlohmann::json config_to_json(const ViTConfig& c) { return detail::to_json_with(c, vit_fields); }
ViTConfig vit_config_from_json(const nlohmann::json& j, const std::string& where) {
  ViTConfig c = detail::from_json_with<ViTConfig>(j, where, vit_fields);
  detail::refuse_rope_base(c, where, "a vit's patches read a learned position table");
  return c;
}
extern const ModelCodec kViTCodec = detail::model_codec<ViT, vit_config_from_json>("vit");

std::unique_ptr<ViT> load_vit(const std::string& path) {
  return load_model_as<ViT>(path, kViTCodec.kind);
}

}  // namespace qkv::nn
