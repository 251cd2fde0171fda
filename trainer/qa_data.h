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
  std::string text;
  double score = 0, null_score = 0;
};
QaAnswer qa_answer(const QaData& d, const std::vector<int64_t>& windows,
                   const std::vector<const real*>& start, const std::vector<const real*>& end,
                   const std::vector<int64_t>& lengths, int64_t max_answer_tokens,
                   double null_margin);

}  // namespace qkv::train
