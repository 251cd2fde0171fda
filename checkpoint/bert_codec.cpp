// How BERT (models/bert.h) is written to and read from a model file: its
// model_config fields and its row of the codec table (nn::ModelCodec,
// checkpoint/model_file.h). Its shape checks are check_config_fits
// (checkpoint/config_fits.cpp).
#include "checkpoint/bert_codec.h"

#include "checkpoint/config_json.h"

namespace qkv::nn {

namespace {

// Every field every file holds, with its JSON key (written and read alike);
// the keys every family shares are written around them
// (checkpoint/config_json.h).
constexpr auto bert_fields = [](auto& c, auto&& f) {
  f("vocab", c.vocab);
  f("max_positions", c.max_positions);
  f("head", c.head);
  detail::stack_fields(c, f);  // d_model, heads, layers, d_ff, dropout, pre_norm, seed
};

// The fields a file may leave out, read as BertConfig's defaults.
constexpr auto bert_optional_fields = [](auto& c, auto&& f) {
  f("segments", c.segments);
  f("classes", c.classes);
  f("sep_id", c.sep_id);
  f("mask_id", c.mask_id);
};

}  // namespace

nlohmann::json config_to_json(const BertConfig& c) {
  return detail::to_json_with(c, bert_fields, bert_optional_fields);
}

BertConfig bert_config_from_json(const nlohmann::json& j, const std::string& where) {
  const BertConfig c =
      detail::from_json_with<BertConfig>(j, where, bert_fields, bert_optional_fields);
  if (c.head != "mlm" && c.head != "classify" && c.head != "qa")
    throw Error(where + ": key 'head' is '" + brief(c.head) + "' (expected mlm, classify or qa)");
  if (c.head == "classify" && c.classes < 1)
    throw Error(where + ": key 'classes' is " + std::to_string(c.classes) +
                ": head classify needs at least 1");
  for (auto [key, id] :
       {std::pair<const char*, int64_t>{"sep_id", c.sep_id}, {"mask_id", c.mask_id}})
    if (id < 0 || id >= c.vocab)
      throw Error(where + ": key '" + key + "' is " + std::to_string(id) +
                  ": outside the vocabulary [0, " + std::to_string(c.vocab) + ")");
  detail::refuse_rope_base(c, where, "a bert reads learned positions");
  return c;
}

extern const ModelCodec kBertCodec = detail::model_codec<Bert, bert_config_from_json>("bert");

std::unique_ptr<Bert> load_bert(const std::string& path) {
  return load_model_as<Bert>(path, kBertCodec.kind);
}

}  // namespace qkv::nn
