// Beam search (the paper's decoder: beam 4, length penalty alpha = 0.6).
//
// Each source keeps `beam` live hypotheses. At every step each live hypothesis
// y is extended by every token v, scored by its summed log-probability
//   logp(y v) = logp(y) + log softmax(logits(y))[v],
// and the `beam` best extensions that do not end in <eos> stay live. An
// extension ending in <eos> among the `beam` best candidates is a finished
// hypothesis, ranked by the GNMT length-normalised score (Wu et al. 2016, eq. 14)
//   score = logp / lp(len),   lp(len) = ((5 + len) / 6)^alpha,
// len counting the generated tokens including the closing <eos> (not <bos>).
// Each source keeps its `beam` best finished hypotheses until no live one can
// beat them: it stops once it has `beam` finished and the best live score,
// normalised at its current length, is no better than the worst of them (the
// GNMT / Hugging Face rule; log-probabilities only fall as a hypothesis grows).
// At max_new_tokens the live hypotheses are finished as they are, without <eos>.
// Ties are broken towards the lower (beam, token) index, so beam = 1 is greedy
// decoding exactly. All sources are decoded together in one batch of
// (sources still running) x beam rows.
#pragma once
#include <functional>
#include <vector>

#include "generation/kv_cache.h"
#include "models/encoder_decoder.h"

namespace qkv::nn {

struct BeamOptions {
  int64_t beam = 4;             // hypotheses kept per source (k); 1 = greedy
  double alpha = 0.6;           // length penalty exponent, >= 0 (0: plain summed log-probability)
  int64_t max_new_tokens = 32;  // cap on generated tokens (not counting <bos>)
  int64_t bos = 1, eos = 2, pad = 0;
  bool ignore_eos = false;        // true: <eos> is an ordinary token and every hypothesis
                                  // runs to max_new_tokens (fixed-length decoding, for benchmarks)
  bool use_cache = true;          // false: rerun the decoder over every hypothesis's whole prefix
                                  // at every step (the slow reference path, for tests)
  std::vector<int64_t> suppress;  // ids no hypothesis is extended by (an answer's: <pad>, <s>)
};

// The best hypothesis of one source: its tokens (without <bos> and <eos>), its
// summed log-probability and its normalised score logp / lp(len).
struct BeamHypothesis {
  std::vector<int64_t> tokens;
  double log_prob = 0, score = 0;
  bool finished = false;  // ended with <eos> (false: stopped at max_new_tokens)
};

// GNMT length penalty ((5 + len) / 6)^alpha.
double length_penalty(int64_t len, double alpha);

// Beam search with the encoder-decoder and its key/value cache (every
// attention kernel; opt.use_cache = false recomputes instead): the best
// hypothesis per source sequence.
std::vector<BeamHypothesis> beam_search(Seq2SeqTransformer& model, const Tokens& src,
                                        const BeamOptions& opt = {});

// The search itself, over any scorer. step(from, ids) is called once per
// generated position: rows are grouped per running source, `beam` consecutive
// rows each; new row r continues old row from[r] (from is empty on the first
// call, when every row starts from <bos>); ids (rows) are the rows' last
// tokens. It returns logits (rows, V), or anything with rows * V elements.
// The model version above reorders its KVCache by `from` and runs decode_step.
using BeamStep =
    std::function<Tensor(const std::vector<int64_t>& from, const std::vector<int64_t>& ids)>;
std::vector<BeamHypothesis> beam_search(int64_t sources, int64_t vocab, const BeamOptions& opt,
                                        const BeamStep& step);

}  // namespace qkv::nn
