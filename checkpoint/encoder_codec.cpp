// How the encoder-only model (models/encoder_only.h) is written to and read from a model file: its
// row of the codec table (nn::ModelCodec, checkpoint/model_file.h). Its file keys, defaults and
// checks are its config's fields in model_file.cpp and check_config_fits.
#include "checkpoint/model_file.h"

namespace qkv::nn {

extern const ModelCodec kEncoderCodec = {
    "encoder",
    [](const Model& m) { return config_to_json(dynamic_cast<const EncoderOnlyModel&>(m).cfg); },
    [](const TensorFile& f, const std::string& p, const nlohmann::json& j, const std::string& w,
       bool b) {
      return rebuild_model<EncoderOnlyModel>(f, p, encoder_config_from_json(j, w), b);
    }};

}  // namespace qkv::nn
