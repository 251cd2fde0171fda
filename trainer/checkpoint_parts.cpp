#include "trainer/checkpoint_parts.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "trainer/token_kinds.h"

namespace qkv::train::detail {

// The model file's kind and its model_config (as JSON), checked present.
std::pair<std::string, json> model_of(const TensorFile& f) {
  auto kind = f.metadata.find("model_kind");
  if (kind == f.metadata.end())
    throw Error(brief(f.path) +
                ": metadata has no 'model_kind': not a model file (nn::save_model) or a training "
                "checkpoint");
  return {kind->second, nn::metadata_json(f.metadata, "model_config", f.path)};
}
// Where the weights sit in the file (metadata 'model_prefix', "" when absent).
std::string model_prefix_of(const TensorFile& f) {
  const auto it = f.metadata.find("model_prefix");
  return it == f.metadata.end() ? "" : it->second;
}
// The model's vocabulary size from its config (gpt, encoder: vocab); a
// family that reads no tokens (vit) has the special tokens alone.
int64_t model_vocab_size(const std::string& kind, const json& mc) {
  const char* key = family(kind, "model_kind").model.vocab_key;
  if (!key) return Vocab().size();
  return mc.at(key).get<int64_t>();
}
// A classifier's label names (metadata 'labels', a list of strings, as many
// as the model has outputs) and its data's shape (the family reads it from
// model_config). A model file written without names gets "0", "1", ...
FileShape file_shape(const TensorFile& f, const std::string& kind, const json& mc) {
  FileShape s;
  const Family& fam = family(kind, "model_kind");
  if (fam.model.shape_from_model) fam.model.shape_from_model(s.shape, mc);
  const auto it = f.metadata.find("labels");
  // Label names belong to a model with a classifier head; anywhere else the
  // key would make a text or task model pass for a classifier.
  if (it != f.metadata.end() && s.shape.classes == 0)
    throw Error(brief(f.path) + ": metadata 'labels': this " + brief(kind) +
                " model has no classifier head (model_config), so label names do not belong in "
                "its file");
  if (it != f.metadata.end()) {
    const json l = nn::metadata_json(f.metadata, "labels", f.path);
    if (!l.is_array() || l.empty() || l.size() > (size_t(1) << 20))
      throw Error(brief(f.path) + ": metadata 'labels' is not a list of label names");
    for (const json& n : l) {
      if (!n.is_string())
        throw Error(brief(f.path) + ": metadata 'labels' holds " + brief(n.dump()) +
                    ", not a label name (a string)");
      s.labels.push_back(n.get<std::string>());
    }
    std::vector<std::string> sorted = s.labels;
    std::sort(sorted.begin(), sorted.end());
    if (auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
      throw Error(brief(f.path) + ": metadata 'labels' names '" + brief(*d) +
                  "' twice (each class needs a name of its own)");
  } else {
    for (int64_t k = 0; k < s.shape.classes; ++k) s.labels.push_back(std::to_string(k));
  }
  if (s.shape.classes && static_cast<int64_t>(s.labels.size()) != s.shape.classes)
    throw Error(brief(f.path) + ": the file's parts disagree: metadata 'labels' names " +
                std::to_string(s.labels.size()) + " labels but model_config's classes is " +
                std::to_string(s.shape.classes));
  return s;
}
// A BPE file's record of the bytes its merges were learned from (metadata
// 'bpe' key 'trained_on'); null when absent (not a BPE file, or none recorded).
json bpe_trained_on(const TensorFile& f) {
  if (!f.metadata.count("bpe")) return nullptr;
  const json b = nn::metadata_json(f.metadata, "bpe", f.path);
  return b.is_object() && b.contains("trained_on") ? b["trained_on"] : json();
}
// A training checkpoint's run settings against its tokenizer: train_config's
// tokens and bpe_vocab must be what metadata 'tokenizer' and 'bpe' hold.
void check_tokenizer_agrees(const TensorFile& f, const TrainConfig& c, const Vocab& v) {
  if (learned_tokens(c.tokens) != (v.bpe() != nullptr))
    throw Error(brief(f.path) + ": the file's parts disagree: train_config says tokens = " +
                brief(c.tokens) + " but metadata 'tokenizer' is " + (v.bpe() ? "bpe" : "not bpe"));
  if (v.bpe() && c.bpe_vocab != v.bpe()->vocab_size())
    throw Error(brief(f.path) + ": the file's parts disagree: train_config says bpe_vocab = " +
                std::to_string(c.bpe_vocab) + " but metadata 'bpe' has " +
                std::to_string(v.bpe()->merges().size()) + " merges (" +
                std::to_string(v.bpe()->vocab_size()) + " tokens)");
}
// Whether the family's own rules take a run without --data (a built-in
// task): bert's and vit's refuse it, so their model files record no task.
bool takes_tasks(const Family& fam, TrainConfig c) {
  c.data.clear();
  bool needs_data = false;
  if (fam.settings.check)
    fam.settings.check(c, [&](bool ok, const char* key, const std::string&) {
      needs_data = needs_data || (!ok && std::string(key) == "data");
    });
  return !needs_data;
}
// The model's position table (its config's max_positions); 0 for a family
// with none (the encoder model's positions are sinusoidal, computed as needed).
int64_t model_max_positions(const json& mc) {
  const json up = nn::upgrade_model_config(mc, "model_config");
  return up.contains("max_positions") ? up.at("max_positions").get<int64_t>() : 0;
}

}  // namespace qkv::train::detail
