#include "generation/answer.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "generation/beam_search.h"
#include "generation/decode.h"
#include "generation/decoding_methods.h"
#include "generation/sampling.h"
#include "models/encoder_only.h"

namespace qkv::nn {

namespace {

// Restores the model's training mode when the answer is done.
struct EvalMode {
  explicit EvalMode(Module& m) : m(m), was_training(m.is_training()) { m.eval(); }
  ~EvalMode() {
    if (was_training) m.train();
  }
  Module& m;
  bool was_training;
};

std::vector<data::Seq> seq2seq_answer(Seq2SeqTransformer& m, const std::vector<data::Seq>& sources,
                                      const AnswerOptions& o, int64_t max_new) {
  const Tokens src = data::right_padded(sources);
  std::vector<data::Seq> out;
  if (o.method == "beam") {
    BeamOptions bo;
    bo.beam = o.beam;
    bo.alpha = o.alpha;
    bo.max_new_tokens = max_new;
    bo.bos = o.bos;
    bo.eos = o.eos;
    bo.pad = o.pad;
    bo.use_cache = o.use_cache;
    for (BeamHypothesis& h : beam_search(m, src, bo)) out.push_back(std::move(h.tokens));
    return out;
  }
  DecodeOptions d;
  d.bos = o.bos;
  d.eos = o.eos;
  d.pad = o.pad;
  d.max_new_tokens = max_new;
  d.use_cache = o.use_cache;
  return greedy_decode(m, src, d);
}

// Greedy continuation of "source <s>" until </s>.
std::vector<data::Seq> gpt_answer(GPT& m, const std::vector<data::Seq>& sources,
                                  const AnswerOptions& o, int64_t max_new) {
  std::vector<data::Seq> prompts;
  int64_t longest = 0;
  for (const data::Seq& s : sources) {
    prompts.push_back(s);
    prompts.back().push_back(o.bos);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts.back().size()));
  }
  if (longest > m.max_positions())
    throw Error("answer: a source of " + std::to_string(longest - 1) +
                " tokens and its <s> do not fit the position table of " +
                std::to_string(m.max_positions()));
  const int64_t n_new = std::max<int64_t>(1, std::min(max_new, m.max_positions() - longest + 1));
  // With the key/value cache, or (use_cache false) the whole sequence
  // through the model at every step.
  SampleOptions s;
  s.temperature = 0;
  s.eos = o.eos;
  s.max_new_tokens = n_new;
  s.use_cache = o.use_cache;
  Generator unused(0);  // greedy draws nothing
  std::vector<data::Seq> out = generate(m, data::right_padded(prompts), s, unused);
  for (data::Seq& a : out)
    if (!a.empty() && a.back() == o.eos) a.pop_back();
  return out;
}

// The most likely label of every source token.
std::vector<data::Seq> encoder_answer(EncoderOnlyModel& m, const std::vector<data::Seq>& sources) {
  const Tokens src = data::right_padded(sources);
  const Tensor logits = m.forward(src).data();  // (B, S, classes)
  const int64_t S = src.len, C = m.cfg.classes;
  std::vector<data::Seq> out(sources.size());
  for (int64_t b = 0; b < src.batch; ++b)
    for (int64_t i = 0; i < src.lengths[b]; ++i) {
      const real* row = logits.data() + (b * S + i) * C;
      out[b].push_back(std::max_element(row, row + C) - row);
    }
  return out;
}

}  // namespace

bool can_beam_search(const Model& model) {
  // Beam search searches the encoder-decoder's output (with the key/value
  // cache, which computes every attention kernel).
  return dynamic_cast<const Seq2SeqTransformer*>(&model) != nullptr;
}

std::vector<data::Seq> answer(Model& model, const std::vector<data::Seq>& sources,
                              const AnswerOptions& o) {
  const DecodingMethod* method = find_decoding_method(o.method);
  if (!method)
    throw Error("answer: the method is " + decoding_method_names("'") + ", got '" +
                brief(o.method, 40) + "'");
  if (o.max_new_tokens < 1)
    throw Error("answer: max_new_tokens must be >= 1, got " + std::to_string(o.max_new_tokens));
  if (sources.empty()) return {};
  for (const data::Seq& s : sources)
    if (s.empty()) throw Error("answer: a source is empty");
  NoGradGuard no_grad;
  EvalMode eval(model);
  if (auto* s2s = dynamic_cast<Seq2SeqTransformer*>(&model)) {
    // A learned position table bounds the decoder's length.
    const int64_t cap = s2s->max_positions();
    return seq2seq_answer(*s2s, sources, o,
                          cap ? std::min(o.max_new_tokens, cap) : o.max_new_tokens);
  }
  if (method->needs_search && !can_beam_search(model))
    throw Error(std::string("answer: beam search here is for the encoder-decoder (seq2seq), not ") +
                model.kind());
  if (auto* gpt = dynamic_cast<GPT*>(&model)) return gpt_answer(*gpt, sources, o, o.max_new_tokens);
  if (auto* enc = dynamic_cast<EncoderOnlyModel*>(&model)) return encoder_answer(*enc, sources);
  throw Error(std::string("answer: no way to answer with a model of kind '") + model.kind() +
              "' (add its case to generation/answer.cpp)");
}

}  // namespace qkv::nn
