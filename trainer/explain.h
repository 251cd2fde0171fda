// train --load FILE --explain TEXT --html PAGE: the gradient explorer
// (explorer/) on a trained model and the user's input. The encoder-decoder
// reads TEXT as its source and is scored on its own greedy answer; a
// decoder-only model trained on pairs reads "TEXT <s> answer"; a language
// model reads TEXT itself, each token predicting the next. The page proves
// the gradients with float64 finite differences: every element of a tensor
// of at most kExplainEveryElement numbers, else the 16 elements of largest
// gradient and 16 drawn at random (marked so on the page).
#pragma once
#include <string>

#include "trainer/trainer.h"

namespace qkv::train {

inline constexpr int64_t kExplainEveryElement = 64;

// Refuses (naming the token) text the model's vocabulary cannot read, and
// text of no tokens, before any work.
Seq explain_input(const Trainer& t, const std::string& text);

// Records the pass and writes the page to `html_path` (atomically). Prints
// one summary line per trace; throws Error when a finite-difference check fails.
// A question-answering model (bert, qa) reads `text` as the question and
// `passage` (a file, --passage) as its context.
void write_explanation(Trainer& t, const std::string& text, const std::string& html_path,
                       const std::string& command, const std::string& passage = "");

}  // namespace qkv::train
