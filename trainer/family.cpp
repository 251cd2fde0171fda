#include "trainer/family.h"

#include <algorithm>

#include "core/error.h"
#include "trainer/token_kinds.h"

namespace qkv::train {

// Each built-in family's row, filled in its own file.
Family seq2seq_family();  // trainer/family_seq2seq.cpp
Family gpt_family();      // trainer/family_gpt.cpp
Family encoder_family();  // trainer/family_encoder.cpp
Family bert_family();     // trainer/family_bert.cpp
Family vit_family();      // trainer/family_vit.cpp

namespace {
Registry<Family>& family_table() {
  static Registry<Family> t{
      "register_family",
      {seq2seq_family(), gpt_family(), encoder_family(), bert_family(), vit_family()}};
  return t;
}
}  // namespace

const Registry<Family>& families() { return family_table(); }

const Family* find_family(const std::string& name) { return family_table().find(name); }

std::string family_names() { return family_table().names(); }

std::string family_help() {
  return one_of(family_table(), [](const Family& f) { return f.help ? f.help : f.name; });
}

const Family& family(const std::string& name, const std::string& where) {
  return family_table().at(name, where);
}

void register_family(const Family& f) { family_table().add(f); }

void unregister_family(const std::string& name) { family_table().remove(name); }

nn::Activation activation_of(const TrainConfig& c) {
  const nn::ActivationKind* k = nn::find_activation(c.activation);
  if (!k)
    throw Error("--activation: expected " + nn::activation_names() + ", got '" +
                brief(c.activation) + "'");
  return k->act;
}

std::vector<std::string> extra_tokens(const Family& f, const TrainConfig& c) {
  std::vector<std::string> out;
  if (f.objectives.extra_special) out.push_back(f.objectives.extra_special);
  if (f.objectives.tokens)
    for (std::string& t : f.objectives.tokens(c)) out.push_back(std::move(t));
  return out;
}

data::Vocab vocab_of_tokens(std::set<std::string, std::less<>> distinct, const Family& f,
                            const TrainConfig& c) {
  if (static_cast<int64_t>(distinct.size()) > c.max_vocab)
    throw Error("--data " + brief(c.data) + ": more distinct tokens than --max-vocab " +
                std::to_string(c.max_vocab) + token_kind(c.tokens, "--tokens").too_many);
  for (const std::string& extra : extra_tokens(f, c)) distinct.emplace(extra);
  return data::Vocab::from_tokens({distinct.begin(), distinct.end()});
}

data::Vocab vocab_of_bpe(const std::string& text, const Family& f, const TrainConfig& c,
                         const std::string& what) {
  try {
    return data::Vocab::from_bpe(data::BPE::train(text, c.bpe_vocab), extra_tokens(f, c));
  } catch (const Error& e) {
    throw Error("--bpe-vocab " + std::to_string(c.bpe_vocab) + ": " + brief(c.data) + " (" + what +
                "): " + e.what());
  }
}

std::pair<int64_t, int64_t> attention_lengths(const Family& f, int64_t src, int64_t tgt) {
  if (f.reports.attention_lengths) return f.reports.attention_lengths(src, tgt);
  const int64_t n = std::max(src, tgt);
  return {n, n};
}

double attention_maps(const Family& f, double T, double S) {
  return f.reports.attention_maps ? f.reports.attention_maps(T, S) : T * S;
}

int64_t sequence_tokens(const Family& f, int64_t n, int64_t m) {
  return f.reads.sequence_tokens ? f.reads.sequence_tokens(n, m) : std::max(n, m);
}

bool fixed_positions(const Family& f, const TrainConfig& c) {
  return f.model.fixed_positions && f.model.fixed_positions(c);
}

std::string layers_text(const Family& f, const TrainConfig& c) {
  return f.reports.layers_text ? f.reports.layers_text(c) : std::to_string(c.layers);
}

}  // namespace qkv::train
