// Extractive question answering's data as the trainer holds it (the data
// source "squad", trainer/qa_data.cpp): every question becomes one or more
// windows "[CLS] question [SEP] context part [SEP]" (data/squad.h), the
// training pairs and the held-out pairs, and for the held-out ones what it
// takes to score an answer: the question, its context and the byte span of
// each context token (the run's token kind says where its tokens are), so
// that a span of tokens reads back as the context's own characters.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/squad.h"

namespace qkv::train {

struct QaQuestion {
  std::string id;
  int64_t paragraph = 0;           // its context: QaData::contexts[paragraph]
  std::vector<std::string> golds;  // the answers' texts; none: impossible (v2)
};

struct QaContext {
  std::string text;
  std::vector<data::ByteSpan> spans;  // each context token's bytes in text
};

// One held-out window: the question it asks and where its context part lies.
struct QaWindowRef {
  int64_t question = 0;       // QaData::questions[question]
  int64_t context_first = 0;  // its first context token
  int64_t offset = 0;         // that token's position in the window
};

struct QaData {
  std::vector<QaContext> contexts;
  std::vector<QaQuestion> questions;  // the held-out ones
  std::vector<QaWindowRef> windows;   // one per held-out pair, in their order
  bool v2 = false;                    // some question has no answer
  int64_t train_questions = 0, train_windows = 0, answers_cut = 0;
};

// The answer a question gets from its windows' span logits: for each of
// its held-out windows w (indices into windows), start[w] and end[w], T_w
// logits each, T_w = lengths[w]. The best span over the windows (start <=
// end, at most max_answer_tokens, in the context), as the context's own
// text, and its score; with d.v2, "" when the best "no answer" score
// ([CLS]'s start + end, the lowest over the windows, as Hugging Face's
// postprocessing) beats it by more than `null_margin`.
struct QaAnswer {
  std::string text;  // "" when "no answer" wins (v2)
  std::string span;  // the best span's text, whether or not it wins
  double score = 0, null_score = 0;
};

// SQuAD v2's "no answer" threshold chosen on a split, as Hugging Face's
// find_best_thresh: each question's null_score - score and the F1 of its
// best span and of "" against its golds; "no answer" is predicted when the
// difference exceeds the threshold. The threshold (one of the differences,
// or 0) that gives the best mean F1, and that F1.
struct QaNullChoice {
  double threshold = 0, f1 = 0;
};
QaNullChoice best_null_threshold(const std::vector<double>& null_minus_span,
                                 const std::vector<double>& span_f1,
                                 const std::vector<double>& null_f1);
QaAnswer qa_answer(const QaData& d, const std::vector<int64_t>& windows,
                   const std::vector<const real*>& start, const std::vector<const real*>& end,
                   const std::vector<int64_t>& lengths, int64_t max_answer_tokens,
                   double null_margin);

}  // namespace qkv::train
