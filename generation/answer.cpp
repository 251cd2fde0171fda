#include "generation/answer.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/registry.h"
#include "generation/decoding_methods.h"

namespace qkv::nn {

// Each built-in family's answerer, defined in its own file.
extern const Answerer kSeq2SeqAnswerer;  // generation/answer_seq2seq.cpp
extern const Answerer kGPTAnswerer;      // generation/answer_gpt.cpp
extern const Answerer kEncoderAnswerer;  // generation/answer_encoder.cpp
extern const Answerer kBertAnswerer;     // generation/answer_bert.cpp
extern const Answerer kViTAnswerer;      // generation/answer_vit.cpp

namespace {
Registry<Answerer, &Answerer::kind>& answerers() {
  static Registry<Answerer, &Answerer::kind> t{
      "register_answerer",
      {kSeq2SeqAnswerer, kGPTAnswerer, kEncoderAnswerer, kBertAnswerer, kViTAnswerer}};
  return t;
}
const Answerer* answerer_of(const Model& model) { return answerers().find(model.kind()); }
}  // namespace

void register_answerer(const Answerer& a) { answerers().add(a); }

void unregister_answerer(const std::string& kind) { answerers().remove(kind); }

bool can_beam_search(const Model& model) {
  // Beam search searches the encoder-decoder's output (with the key/value
  // cache, which computes every attention kernel).
  const Answerer* a = answerer_of(model);
  return a && a->can_search;
}

std::vector<data::Seq> answer(Model& model, const std::vector<data::Seq>& sources,
                              const AnswerOptions& o) {
  const DecodingMethod* method = find_decoding_method(o.method);
  if (!method)
    throw Error("answer: the method is " + decoding_method_names("'") + ", got '" +
                brief(o.method) + "'");
  if (o.max_new_tokens < 1)
    throw Error("answer: max_new_tokens must be >= 1, got " + std::to_string(o.max_new_tokens));
  if (sources.empty()) return {};
  for (const data::Seq& s : sources)
    if (s.empty()) throw Error("answer: a source is empty");
  NoGradGuard no_grad;
  EvalModeGuard eval(model);
  const Answerer* a = answerer_of(model);
  if (!a)
    throw Error(std::string("answer: no way to answer with a model of kind '") + model.kind() +
                "' (register its answerer: nn::register_answerer, generation/answer.h)");
  if (method->needs_search && !a->can_search)
    throw Error(std::string("answer: beam search here is for the encoder-decoder (seq2seq), not ") +
                model.kind());
  return a->answer(model, sources, o);
}

}  // namespace qkv::nn
