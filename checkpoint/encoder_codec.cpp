// How the encoder-only model (models/encoder_only.h) is written to and read from a model file: its
// model_config fields and its row of the codec table (nn::ModelCodec,
// checkpoint/model_file.h). Its shape checks are check_config_fits
// (checkpoint/config_fits.cpp).
#include "checkpoint/config_json.h"
#include "checkpoint/model_file.h"

namespace qkv::nn {

namespace {

// Every field of the config with its JSON key, so that writing and reading
// cannot drift apart; the keys every family shares are written around them
// (checkpoint/config_json.h).
constexpr auto encoder_fields = [](auto& c, auto&& f) {
  f("vocab", c.vocab);
  f("classes", c.classes);
  detail::stack_fields(c, f);  // d_model, heads, layers, d_ff, dropout, pre_norm, seed
};

}  // namespace

nlohmann::json config_to_json(const EncoderOnlyConfig& c) {
  return detail::to_json_with(c, encoder_fields);
}
EncoderOnlyConfig encoder_config_from_json(const nlohmann::json& j, const std::string& where) {
  EncoderOnlyConfig c = detail::from_json_with<EncoderOnlyConfig>(j, where, encoder_fields);
  detail::refuse_rope_base(c, where, "an encoder adds sinusoidal positions or T5's relative bias");
  return c;
}
extern const ModelCodec kEncoderCodec =
    detail::model_codec<EncoderOnlyModel, encoder_config_from_json>("encoder");

}  // namespace qkv::nn
