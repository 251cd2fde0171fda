// Extractive question answering's data, in SQuAD's format (Rajpurkar et al.
// 2016, 2018), and what is computed on it without a model:
//
//   parse_squad      SQuAD v1.1 / v2.0 JSON -> paragraphs and their questions,
//                    every answer_start checked against its text
//   qa_windows       [CLS] question [SEP] context [SEP] windows of a context
//                    longer than the model reads, overlapping by a stride,
//                    each with the token positions of its answer ([CLS]: none)
//   best_span        the highest start + end logit with start <= end and at
//                    most max_len tokens, over the allowed positions
//   squad_exact, squad_f1   SQuAD's official metrics (its normalisation:
//                    lower case, no punctuation, no articles, one space)
//
// As Hugging Face's run_qa.py and its utils_qa.py do, with the difference
// that best_span searches every pair (its n_best_size of 20 starts and ends
// prunes; here the window is at most a few hundred tokens, and the search is
// exact).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "data/batch.h"
#include "data/vocab.h"

namespace qkv::data {

struct SquadAnswer {
  std::string text;
  int64_t start = 0;  // answer_start: the answer's first byte in the context
};

struct SquadQuestion {
  std::string id, question;
  std::vector<SquadAnswer> answers;  // v2's impossible questions: none
  bool impossible = false;
};

struct SquadParagraph {
  std::string context;
  std::vector<SquadQuestion> questions;
};

struct SquadFile {
  std::vector<SquadParagraph> paragraphs;
  bool v2 = false;  // some question says is_impossible: true
  int64_t questions = 0;
};

// Parses SQuAD JSON ({"data": [{"paragraphs": [{"context", "qas": [{"id",
// "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}).
// answer_start counts characters in SQuAD's own files (Python strings);
// here a context is UTF-8 and answer_start is read as a character index and
// turned into a byte offset, then checked: the context's bytes there must be
// the answer's text. Errors name `where`, and the question id: a mismatch,
// an empty context, an empty question, a duplicate id, text that is not
// UTF-8, an answerable question without answers.
SquadFile parse_squad(const std::string& json_text, const std::string& where);

// A context's windows for one question (ids without specials): each window
// is "[CLS] question [SEP] context[first .. first+n) [SEP]", at most `window`
// tokens; consecutive windows overlap by `stride` context tokens (Hugging
// Face's doc_stride). answer_first/answer_last: the answer's context tokens
// (inclusive), or -1 for none; a window that does not hold all of the
// answer points at [CLS] (0, 0).
struct QaWindow {
  Seq ids;                       // with the specials
  std::vector<uint8_t> allowed;  // ids.size(): [CLS] and the context's tokens
  int64_t context_first = 0;     // the context token at the window's first context position
  int64_t offset = 0;            // that position in ids: question + 2
  int64_t start = 0, end = 0;    // the answer's positions in ids, or 0, 0
};
std::vector<QaWindow> qa_windows(const Seq& question, const Seq& context, int64_t window,
                                 int64_t stride, int64_t answer_first, int64_t answer_last,
                                 int64_t cls_id, int64_t sep_id);

// The context tokens that hold bytes [begin, end) of the context, as
// (first, last), inclusive; (-1, -1) when no token overlaps it.
std::pair<int64_t, int64_t> tokens_of_bytes(const std::vector<ByteSpan>& spans, int64_t begin,
                                            int64_t end);

struct Span {
  int64_t start = 0, end = 0;  // positions, inclusive
  double score = 0;            // start logit + end logit
};
// The best span of one window: start <= end, end - start + 1 <= max_len,
// both allowed, and not [CLS] (position 0: "none" is scored apart, by
// start[0] + end[0]). start/end: T logits each. Exact, O(T * max_len).
// score -inf when no position but [CLS] is allowed.
Span best_span(const real* start, const real* end, const std::vector<uint8_t>& allowed,
               int64_t max_len);

// SQuAD's normalisation and metrics; the best over the gold answers (an
// impossible question's gold is "" and only "" matches it).
std::string squad_normalize(std::string_view s);
double squad_exact(const std::string& prediction, const std::vector<std::string>& golds);
double squad_f1(const std::string& prediction, const std::vector<std::string>& golds);

}  // namespace qkv::data
