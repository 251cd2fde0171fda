// Answers from any model family (models/model.h). How each family turns a
// source into an answer is its answerer, kept in the family's own file and
// found by the model's kind() in one table:
//
//   seq2seq   answer_seq2seq.cpp  encode the source, decode from <s>: greedy
//             (generation/decode.h) or beam search (generation/beam_search.h)
//   gpt       answer_gpt.cpp      continue "source <s>" greedily until </s>
//             (generation/sampling.h, temperature 0), within the position table
//   encoder   answer_encoder.cpp  the most likely label of every source token
//   bert      answer_bert.cpp     classify: the most likely label; mlm: the source with
//             each [MASK] replaced by its most likely token
//   vit       answer_vit.cpp      the likeliest class of an image (its pixels), one token
//
// The decoding methods are rows of generation/decoding_methods.h.
//
//   nn::AnswerOptions o;  o.method = "beam";
//   std::vector<data::Seq> out = nn::answer(model, {{5, 6, 7}}, o);
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/batch.h"
#include "models/model.h"

namespace qkv::nn {

struct AnswerOptions {
  std::string method = "greedy";  // greedy | beam (beam: the encoder-decoder only)
  int64_t beam = 4;               // hypotheses kept per source
  double alpha = 0.6;             // beam's length penalty exponent (GNMT)
  int64_t max_new_tokens = 32;    // the longest answer (a position table may cap it lower)
  bool use_cache = true;          // false: recompute the prefix every step (every decoder)
  int64_t bos = data::kBos, eos = data::kEos, pad = data::kPad;
};

// Whether answer() can search with method "beam" for this model: an
// encoder-decoder (any attention kernel).
bool can_beam_search(const Model& model);

// How one family answers: found by the model's kind().
struct Answerer {
  const char* kind;  // Model::kind()
  bool can_search;   // takes the decoding methods that need search (beam)
  std::vector<data::Seq> (*answer)(Model& model, const std::vector<data::Seq>& sources,
                                   const AnswerOptions& o);
};
// Adds a program's own family's answerer; throws when its kind has one.
// unregister_answerer removes it again.
void register_answerer(const Answerer& a);
void unregister_answerer(const std::string& kind);

// One answer per source, without <s> and </s>; no graph is recorded, and the
// model is run in eval mode (and left in the mode it was in).
std::vector<data::Seq> answer(Model& model, const std::vector<data::Seq>& sources,
                              const AnswerOptions& o = {});

}  // namespace qkv::nn
