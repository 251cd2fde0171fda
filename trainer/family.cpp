#include "trainer/family.h"

#include <algorithm>

#include "core/error.h"

namespace qkv::train {

// Each built-in family's entry, defined in its own file.
extern const Family kSeq2SeqFamily;  // trainer/family_seq2seq.cpp
extern const Family kGPTFamily;      // trainer/family_gpt.cpp
extern const Family kEncoderFamily;  // trainer/family_encoder.cpp
extern const Family kViTFamily;      // trainer/family_vit.cpp
extern const Family kBertFamily;     // trainer/family_bert.cpp

namespace {
std::vector<Family>& table() {
  static std::vector<Family> t = {kSeq2SeqFamily, kGPTFamily, kEncoderFamily, kBertFamily,
                                  kViTFamily};
  return t;
}
}  // namespace

const std::vector<Family>& families() { return table(); }

const Family* find_family(const std::string& name) {
  for (const Family& f : table())
    if (name == f.name) return &f;
  return nullptr;
}

std::string family_names() {
  return one_of(table(), [](const Family& f) { return f.name; });
}

std::string family_help() {
  return one_of(table(), [](const Family& f) { return f.help; });
}

const Family& family(const std::string& name, const std::string& where) {
  if (const Family* f = find_family(name)) return *f;
  throw Error(where + ": expected " + family_names() + ", got '" + brief(name) + "'");
}

void register_family(const Family& f) {
  if (find_family(f.name))
    throw Error(std::string("register_family: a family named '") + f.name + "' exists");
  table().push_back(f);
}

void unregister_family(const std::string& name) {
  std::vector<Family>& t = table();
  t.erase(std::remove_if(t.begin(), t.end(), [&](const Family& f) { return name == f.name; }),
          t.end());
}

nn::Activation activation_of(const TrainConfig& c) {
  const nn::ActivationKind* k = nn::find_activation(c.activation);
  if (!k)
    throw Error("--activation: expected " + nn::activation_names() + ", got '" +
                brief(c.activation) + "'");
  return k->act;
}

std::string one_stack(const TrainConfig& c) { return std::to_string(c.layers); }

std::vector<std::string> extra_tokens(const Family& f, const TrainConfig& c) {
  std::vector<std::string> out;
  if (f.extra_special) out.push_back(f.extra_special);
  if (f.objective_tokens)
    for (std::string& t : f.objective_tokens(c)) out.push_back(std::move(t));
  return out;
}

data::Vocab vocab_of_tokens(std::set<std::string, std::less<>> distinct, const Family& f,
                            const TrainConfig& c) {
  if (static_cast<int64_t>(distinct.size()) > c.max_vocab)
    throw Error("--data " + brief(c.data) + ": more distinct tokens than --max-vocab " +
                std::to_string(c.max_vocab) + (c.tokens == "word" ? "" : " (try --tokens word?)"));
  for (const std::string& extra : extra_tokens(f, c)) distinct.emplace(extra);
  return data::Vocab::from_tokens({distinct.begin(), distinct.end()});
}

std::pair<int64_t, int64_t> attention_lengths(const Family& f, int64_t src, int64_t tgt) {
  if (f.attention_lengths) return f.attention_lengths(src, tgt);
  const int64_t n = std::max(src, tgt);
  return {n, n};
}

double attention_maps(const Family& f, double T, double S) {
  return f.attention_maps ? f.attention_maps(T, S) : T * S;
}

}  // namespace qkv::train
