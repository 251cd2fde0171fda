// How BERT (models/bert.h) answers (generation/answer.h): its row of
// answer()'s table. A source is the model's whole input, as it trained on it
// ("<s> tokens </s>", or "<s> A </s> B </s>").
//   head classify: the likeliest label, as a one-token answer;
//   head mlm:      the source with each [MASK] (cfg.mask_id) replaced by its
//                  likeliest token (argmax), every other token as it was.
// Neither searches: each answer is one pass of the encoder.
#include <algorithm>

#include "generation/answer.h"
#include "generation/finite_logits.h"
#include "models/bert.h"

namespace qkv::nn {

namespace {

int64_t argmax(const real* row, int64_t n) {
  check_finite_logits(row, n, "bert answer");
  return std::max_element(row, row + n) - row;
}

std::vector<data::Seq> bert_answer(Bert& m, const std::vector<data::Seq>& sources) {
  const Tokens src = data::right_padded(sources);
  const Tensor logits = m.forward(src).data();  // mlm (B,T,V); classify (B,classes)
  std::vector<data::Seq> out(sources.size());
  if (!m.mlm) {
    for (int64_t b = 0; b < src.batch; ++b)
      out[b] = {argmax(logits.data() + b * m.cfg.classes, m.cfg.classes)};
    return out;
  }
  const int64_t T = src.len, V = m.cfg.vocab;
  for (int64_t b = 0; b < src.batch; ++b) {
    out[b] = sources[b];
    for (int64_t i = 0; i < src.lengths[b]; ++i)
      if (out[b][i] == m.cfg.mask_id) out[b][i] = argmax(logits.data() + (b * T + i) * V, V);
  }
  return out;
}

}  // namespace

extern const Answerer kBertAnswerer = {
    "bert", false, [](Model& model, const std::vector<data::Seq>& sources, const AnswerOptions&) {
      return bert_answer(dynamic_cast<Bert&>(model), sources);
    }};

}  // namespace qkv::nn
