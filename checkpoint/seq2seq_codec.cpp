// How the encoder-decoder (models/encoder_decoder.h) is written to and read from a model file: its
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
constexpr auto transformer_fields = [](auto& c, auto&& f) {
  f("src_vocab", c.src_vocab);
  f("tgt_vocab", c.tgt_vocab);
  f("d_model", c.d_model);
  f("heads", c.heads);
  f("encoder_layers", c.encoder_layers);
  f("decoder_layers", c.decoder_layers);
  f("d_ff", c.d_ff);
  f("dropout", c.dropout);
  f("pre_norm", c.pre_norm);
  f("tie_weights", c.tie_weights);
  f("learned_positions", c.learned_positions);
  f("max_positions", c.max_positions);
  f("seed", c.seed);
};

}  // namespace

nlohmann::json config_to_json(const TransformerConfig& c) {
  return detail::to_json_with(c, transformer_fields);
}
TransformerConfig transformer_config_from_json(const nlohmann::json& j, const std::string& where) {
  TransformerConfig c = detail::from_json_with<TransformerConfig>(j, where, transformer_fields);
  detail::refuse_rope_base(c, where, "a seq2seq adds a position table or T5's relative bias");
  return c;
}
extern const ModelCodec kSeq2SeqCodec =
    detail::model_codec<Seq2SeqTransformer, transformer_config_from_json>("seq2seq");

}  // namespace qkv::nn
