#include "trainer/presets.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace qkv::train {

const Registry<Preset>& presets() {
  static const Registry<Preset> table{
      "preset",
      {
          // The block of Llama (Touvron et al. 2023): Pre-norm with RMSNorm, a
          // SwiGLU feed-forward, no biases, rotary positions, and grouped-query
          // attention (Llama 2's larger models; here pairs of query heads share
          // one key/value head, K = H/2, when H is even). The output layer stays tied to the
          // token embedding, as the gpt family's default and Llama 3.2's small
          // models: at qkv's sizes an untied head would add V*D parameters, more
          // than a layer, and the preset would no longer compare with the 2017
          // GPT (learned positions, LayerNorm, GELU, biases) at about equal size.
          {"llama",
           "Pre-LN, rms, swiglu, rope, K=H/2, no bias",
           // A causal language model: one that continues text (bert reads text
           // too, but fills in masks).
           [](const Family& f) { return f.reads.text && f.answers.sample != nullptr; },
           "language models",
           {{"pre_ln", true},
            {"norm", "rms"},
            {"activation", "swiglu"},
            {"no_bias", true},
            {"positions", "rope"},
            {"tie", true}},
           [](TrainConfig& c, const std::vector<std::string>& given) {
             const bool said = std::find(given.begin(), given.end(), "kv_heads") != given.end();
             if (!said && c.heads % 2 == 0) c.kv_heads = c.heads / 2;
           }},
          // T5's encoder-decoder (Raffel et al. 2020): Pre-norm with RMSNorm (a
          // gain, no shift), no biases (but the output layer's), a ReLU feed-forward (T5 1.0's; 1.1
          // moved
          // to GEGLU), the output layer tied to the embedding, and no absolute
          // positions: a learned bias per head per relative-distance bucket, one
          // table per stack shared by its layers (--rel-buckets 32
          // --rel-max-distance 128 by default, T5's). Pre-training by span
          // corruption is --objective span. Unlike T5, the scores keep their
          // 1/sqrt(d_k): T5 drops it and folds it into W_Q's initialisation, and
          // qkv's initialisation is the 2017 paper's.
          {"t5",
           "Pre-LN, rms, relu, relative, no bias",
           // An encoder-decoder: the family that learns by span corruption.
           [](const Family& f) {
             return std::string(f.objectives.names).find("span") != std::string::npos;
           },
           "the encoder-decoder",
           {{"pre_ln", true},
            {"norm", "rms"},
            {"activation", "relu"},
            {"no_bias", true},
            {"positions", "relative"},
            {"tie", true}}},
      }};
  return table;
}

const Preset* find_preset(const std::string& name) { return presets().find(name); }

std::string preset_help() {
  std::string s;
  for (const Preset& p : presets())
    s += std::string(s.empty() ? "" : ";\n") + p.name + ": " + p.help;  // a line each
  return s;
}

std::string preset_names() { return presets().names(); }

void apply_preset(const std::string& name, TrainConfig& c, std::vector<std::string>& given) {
  const Preset* p = find_preset(name);
  if (!p) throw Error("--preset: expected " + preset_names() + ", got '" + brief(name) + "'");
  const std::string where = std::string("--preset ") + p->name;
  // An unknown --model is refused by validate(), naming the families.
  if (const Family* fam = find_family(c.model); fam && !p->fits(*fam)) {
    std::vector<const Family*> fit;
    for (const Family& f : families())
      if (p->fits(f)) fit.push_back(&f);
    throw Error(where + ": fits " + p->fits_what + " (--model " +
                one_of(fit, [](const Family* f) { return f->name; }) + "), not --model " +
                brief(c.model));
  }
  json j = c.to_json();
  for (const auto& [key, value] : p->settings) {
    if (!j.contains(key)) throw Error(where + ": sets '" + key + "', which is no setting");
    if (std::find(given.begin(), given.end(), key) != given.end()) continue;  // the flag wins
    j[key] = value;
    given.push_back(key);
  }
  c = TrainConfig::from_json(j, where);
  if (p->derive) p->derive(c, given);
}

}  // namespace qkv::train
