// Sampling text from a decoder-only (GPT) model. At each step the next token
// is drawn from the model's distribution over the vocabulary, reshaped by
//   temperature T:  p ~ softmax(logits / T)   (T < 1 sharpens, T > 1 flattens;
//                   T = 0 is greedy: the argmax, no random draw),
//   top-k:          only the k most likely tokens stay (Fan et al. 2018),
//   top-p:          only the smallest set of most likely tokens whose
//                   probability reaches p stays (nucleus sampling, Holtzman et al. 2019),
// applied in that order (as Hugging Face does), then renormalised. The random
// numbers come from the Generator passed in, one uniform draw per sampled
// token, so the same seed gives the same text.
#pragma once
#include <optional>
#include <vector>

#include "core/generator.h"
#include "generation/kv_cache.h"
#include "models/gpt.h"

namespace qkv::nn {

struct SampleOptions {
  int64_t max_new_tokens = 32;   // tokens generated per prompt (fewer if <eos> comes first)
  double temperature = 1.0;      // >= 0; 0 = greedy
  std::optional<int64_t> top_k;  // unset: all tokens; else >= 1
  double top_p = 1.0;            // in (0, 1]; 1 = off
  std::optional<int64_t>
      eos;  // if set, a row stops after generating this token (kept in the output)
  std::vector<int64_t>
      suppress;           // token ids never generated (e.g. <pad> and <s> in a text model's output)
  bool use_cache = true;  // false: each row's whole sequence through the model at every step
                          // (the slow reference path; the same tokens for the same seed)
};

// Throws qkv::Error naming the bad option (top_k < 1, top_p outside (0, 1],
// temperature < 0, max_new_tokens < 0).
void check_sample_options(const SampleOptions& opt);

// Scratch for sample_token, sized to the vocabulary once.
struct SampleScratch {
  std::vector<real> prob;
  std::vector<int64_t> order;
};

// One token drawn from logits[0, V) under opt (temperature, top_k, top_p).
// Throws qkv::Error when V < 1 (no token to draw).
int64_t sample_token(const real* logits, int64_t V, const SampleOptions& opt, Generator& gen,
                     SampleScratch& scratch);

// Continues each prompt of `prompt` (B, L; prompt.lengths[b] >= 1 tokens of row
// b, the rest padding) by max_new_tokens sampled tokens, with the key/value
// cache (every attention kernel; opt.use_cache = false runs each row's whole
// sequence through the model at every step instead). The ids in
// opt.suppress get logit -inf before each draw (an id outside [0, V), or suppressing every token,
// is an Error). Returns the new tokens per row (not the prompt). Needs max(lengths) +
// max_new_tokens - 1 <= cfg.max_positions (the position table) and a vocabulary of at least one
// token.
std::vector<std::vector<int64_t>> generate(GPT& model, const Tokens& prompt,
                                           const SampleOptions& opt, Generator& gen);

}  // namespace qkv::nn
