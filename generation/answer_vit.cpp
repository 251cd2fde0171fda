// How the Vision Transformer (models/vit.h) answers (generation/answer.h): its row of
// answer()'s table.
#include <algorithm>

#include "generation/answer.h"
#include "generation/finite_logits.h"
#include "models/vit.h"

namespace qkv::nn {

// The likeliest class of each image (a source of C*H*W pixel values), as a
// one-token answer.
extern const Answerer kViTAnswerer = {
    "vit", false, [](Model& model, const std::vector<data::Seq>& sources, const AnswerOptions&) {
      auto& m = dynamic_cast<ViT&>(model);
      const Tensor p = m.probabilities(sources);  // (B, classes)
      const int64_t C = m.cfg.classes;
      std::vector<data::Seq> out(sources.size());
      for (size_t b = 0; b < sources.size(); ++b) {
        const real* row = p.data() + static_cast<int64_t>(b) * C;
        check_finite_logits(row, C, "vit answer");
        out[b] = {std::max_element(row, row + C) - row};
      }
      return out;
    }};

}  // namespace qkv::nn
