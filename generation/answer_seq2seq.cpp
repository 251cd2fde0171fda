// How the encoder-decoder (models/encoder_decoder.h) answers (generation/answer.h): its row of
// answer()'s table.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "generation/beam_search.h"
#include "generation/decode.h"
#include "generation/answer.h"

namespace qkv::nn {

namespace {

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
    bo.suppress = {o.pad, o.bos};  // an answer never holds them
    for (BeamHypothesis& h : beam_search(m, src, bo)) out.push_back(std::move(h.tokens));
    return out;
  }
  DecodeOptions d;
  d.bos = o.bos;
  d.eos = o.eos;
  d.pad = o.pad;
  d.max_new_tokens = max_new;
  d.use_cache = o.use_cache;
  d.suppress = {o.pad, o.bos};  // an answer never holds them
  return greedy_decode(m, src, d);
}

}  // namespace

// Encode the source, decode from <s>: greedy or beam search. A learned
// position table bounds the decoder's length.
extern const Answerer kSeq2SeqAnswerer = {
    "seq2seq", true,
    [](Model& model, const std::vector<data::Seq>& sources, const AnswerOptions& o) {
      auto& m = dynamic_cast<Seq2SeqTransformer&>(model);
      const int64_t cap = m.max_positions();
      return seq2seq_answer(m, sources, o,
                            cap ? std::min(o.max_new_tokens, cap) : o.max_new_tokens);
    }};

}  // namespace qkv::nn
