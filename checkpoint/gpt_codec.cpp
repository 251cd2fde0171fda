// How the decoder-only model (models/gpt.h) is written to and read from a model file: its
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
constexpr auto gpt_fields = [](auto& c, auto&& f) {
  f("vocab", c.vocab);
  f("d_model", c.d_model);
  f("heads", c.heads);
  f("layers", c.layers);
  f("d_ff", c.d_ff);
  f("max_positions", c.max_positions);
  f("dropout", c.dropout);
  f("pre_norm", c.pre_norm);
  f("tie_weights", c.tie_weights);
  f("seed", c.seed);
};

}  // namespace

nlohmann::json config_to_json(const GPTConfig& c) { return detail::to_json_with(c, gpt_fields); }
GPTConfig gpt_config_from_json(const nlohmann::json& j, const std::string& where) {
  return detail::from_json_with<GPTConfig>(j, where, gpt_fields);
}
extern const ModelCodec kGPTCodec = detail::model_codec<GPT, gpt_config_from_json>("gpt");

}  // namespace qkv::nn
