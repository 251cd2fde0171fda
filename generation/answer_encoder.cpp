// How the encoder-only model (models/encoder_only.h) answers (generation/answer.h): its row of
// answer()'s table.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "models/encoder_only.h"
#include "generation/answer.h"
#include "generation/finite_logits.h"

namespace qkv::nn {

namespace {

// The most likely label of every source token.
std::vector<data::Seq> encoder_answer(EncoderOnlyModel& m, const std::vector<data::Seq>& sources) {
  const Tokens src = data::right_padded(sources);
  const Tensor logits = m.forward(src).data();  // (B, S, classes)
  const int64_t S = src.len, C = m.cfg.classes;
  std::vector<data::Seq> out(sources.size());
  for (int64_t b = 0; b < src.batch; ++b)
    for (int64_t i = 0; i < src.lengths[b]; ++i) {
      const real* row = logits.data() + (b * S + i) * C;
      check_finite_logits(row, C, "encoder answer");
      out[b].push_back(std::max_element(row, row + C) - row);
    }
  return out;
}

}  // namespace

// The most likely label of every source token.
extern const Answerer kEncoderAnswerer = {
    "encoder", false,
    [](Model& model, const std::vector<data::Seq>& sources, const AnswerOptions&) {
      return encoder_answer(dynamic_cast<EncoderOnlyModel&>(model), sources);
    }};

}  // namespace qkv::nn
