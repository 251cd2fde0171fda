// How the decoder-only model (models/gpt.h) answers (generation/answer.h): its row of answer()'s
// table.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "generation/sampling.h"
#include "generation/answer.h"

namespace qkv::nn {

namespace {

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
  s.suppress = {o.pad, o.bos};  // an answer never holds them
  Generator unused(0);          // greedy draws nothing
  std::vector<data::Seq> out = generate(m, data::right_padded(prompts), s, unused);
  for (data::Seq& a : out)
    if (!a.empty() && a.back() == o.eos) a.pop_back();
  return out;
}

}  // namespace

// Continue "source <s>" greedily until </s>, within the position table.
extern const Answerer kGPTAnswerer = {
    "gpt", false, [](Model& model, const std::vector<data::Seq>& sources, const AnswerOptions& o) {
      return gpt_answer(dynamic_cast<GPT&>(model), sources, o, o.max_new_tokens);
    }};

}  // namespace qkv::nn
