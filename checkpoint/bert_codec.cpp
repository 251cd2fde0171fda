// How BERT (models/bert.h) is written to and read from a model file: its
// model_config fields and its row of the codec table (nn::ModelCodec,
// checkpoint/model_file.h). Its shape checks are check_config_fits
// (checkpoint/config_fits.cpp).
#include "checkpoint/bert_codec.h"

#include "checkpoint/config_json.h"

namespace qkv::nn {

using json = nlohmann::json;

namespace {

// Every field every file holds, with its JSON key (written and read alike).
template <class C, class F>
void bert_fields(C& c, F&& f) {
  f("vocab", c.vocab);
  f("max_positions", c.max_positions);
  f("head", c.head);
  f("d_model", c.d_model);
  f("heads", c.heads);
  f("layers", c.layers);
  f("d_ff", c.d_ff);
  f("dropout", c.dropout);
  f("pre_norm", c.pre_norm);
  f("seed", c.seed);
}

// The fields a file may leave out, read as BertConfig's defaults.
template <class C, class F>
void bert_optional_fields(C& c, F&& f) {
  f("segments", c.segments);
  f("classes", c.classes);
  f("sep_id", c.sep_id);
  f("mask_id", c.mask_id);
}

}  // namespace

json config_to_json(const BertConfig& c) {
  return detail::to_json_with(c, [](auto& cc, auto&& f) {
    bert_fields(cc, f);
    bert_optional_fields(cc, f);
  });
}

BertConfig bert_config_from_json(const json& j, const std::string& where) {
  BertConfig c =
      detail::from_json_with<BertConfig>(j, where, [](auto& cc, auto&& f) { bert_fields(cc, f); });
  bert_optional_fields(c, [&](const char* k, auto& v) {
    if (j.contains(k)) read_json_field(j, k, v, where);
  });
  if (c.head != "mlm" && c.head != "classify")
    throw Error(where + ": key 'head' is '" + brief(c.head) + "' (expected mlm or classify)");
  if (c.head == "classify" && c.classes < 1)
    throw Error(where + ": key 'classes' is " + std::to_string(c.classes) +
                ": head classify needs at least 1");
  for (auto [key, id] :
       {std::pair<const char*, int64_t>{"sep_id", c.sep_id}, {"mask_id", c.mask_id}})
    if (id < 0 || id >= c.vocab)
      throw Error(where + ": key '" + key + "' is " + std::to_string(id) +
                  ": outside the vocabulary [0, " + std::to_string(c.vocab) + ")");
  if (c.rope_base != 0)
    throw Error(where + ": key 'rope_base': a bert reads learned positions (leave it out)");
  return c;
}

extern const ModelCodec kBertCodec = {
    "bert", [](const Model& m) { return config_to_json(dynamic_cast<const Bert&>(m).cfg); },
    [](const TensorFile& f, const std::string& p, const nlohmann::json& j, const std::string& w,
       bool b) { return rebuild_model<Bert>(f, p, bert_config_from_json(j, w), b); }};

std::unique_ptr<Bert> load_bert(const std::string& path) {
  return load_model_as<Bert>(path, kBertCodec.kind);
}

}  // namespace qkv::nn
