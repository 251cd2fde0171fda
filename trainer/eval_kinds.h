// How a run is scored on held-out data and how the scores are reported: one
// row per kind of evaluation, found through one table (eval_kinds.cpp), each
// row filled by name in its own file, as data sources are
// (trainer/data_sources.h):
//
//   kind       file                         scores a run that     judged by
//   labels     trainer/classify_report.cpp  classifies            accuracy: --target stops
//   masked     trainer/eval_masked.cpp      learns made targets   loss: best kept, --patience
//                                           of text (mlm, span)
//   text       trainer/eval_text.cpp        predicts next tokens  loss: best kept, --patience
//   sequences  trainer/eval_sequences.cpp   answers pairs         exact-sequence accuracy
//   qa         trainer/eval_qa.cpp          answers questions     SQuAD's F1 (and exact match)
//
// Trainer::evaluate() marks its result with the run's row (EvalResult::kind);
// the training loop (trainer/run.cpp) prints an evaluation's line, fills its
// log.csv cells, draws its curve and stops early by the row, and the report
// after training is the row's. A program (or a test) adds a kind of its own
// with register_eval_kind().
#pragma once
#include <string>

#include "core/registry.h"
#include "trainer/plots.h"

namespace qkv::train {

class Trainer;
struct EvalResult;
struct RunOptions;

// An evaluation's held-out cells of log.csv (heldout_exact_acc,
// heldout_token_acc, heldout_loss, heldout_bleu, heldout_bits_per_byte); ""
// leaves a cell empty.
struct EvalCells {
  std::string exact_acc, token_acc, loss, bleu, bits_per_byte;
};

// printf's format as a string, as long as it needs to be (a perplexity of
// e^700 prints 300 digits): the rows' lines.
std::string printed(const char* format, ...) __attribute__((format(printf, 1, 2)));

// The cells of a run scored by its answers (exact and token accuracy, loss,
// BLEU: sequences, labels) and of one scored on text (loss, bits per byte:
// text, masked).
EvalCells answer_cells(const EvalResult& r);
EvalCells text_cells(const EvalResult& r);

// A kind's row, filled by name; every member left out keeps its default.
struct EvalKind {
  const char* name = nullptr;  // "sequences": the table's name for it
  const char* help = nullptr;  // what it measures, in a few words
  // Whether it scores this run (labels: a classifier). The rows' `takes`
  // are disjoint; null: the general row, for a run no other row takes.
  bool (*takes)(const Trainer& t) = nullptr;
  // One evaluation as a line: "exact 99.50%, token 99.90%, BLEU 99.71, ...".
  std::string (*line)(const EvalResult& r) = nullptr;
  // The run's last line: "held-out exact-sequence accuracy: 99.50%".
  std::string (*summary)(const EvalResult& r) = nullptr;
  // Its cells of log.csv at an evaluation.
  EvalCells (*cells)(const EvalResult& r) = nullptr;
  // What evaluations are judged by: Loss (lower is better: loss.svg draws
  // the held-out loss, the best checkpoint is kept, --patience stops the
  // run) or Accuracy (higher: loss.svg draws it, --target stops the run).
  plots::EvalKind judged_by = plots::EvalKind::Accuracy;
  double (*metric)(const EvalResult& r) = nullptr;  // the number judged
  // How it evaluates the held-out data, when not as its data asks
  // (Trainer::evaluate: teacher-forced loss and decoded answers for pairs,
  // the loss for text). qa: each question's best span over its windows.
  EvalResult (*evaluate)(Trainer& t) = nullptr;
  // The report after training (held-out results, examples, the test set):
  // prints it and returns the result the run's last line reports.
  EvalResult (*final_report)(Trainer& t, const RunOptions& o) = nullptr;
};

// The built-in kinds and any registered since, in the order of the table above.
const Registry<EvalKind>& eval_kinds();
// The row that scores `t`'s run: the first whose `takes` says yes, else the general one.
const EvalKind& eval_kind(const Trainer& t);
// Adds a kind (a program's own); throws when the name is taken.
// unregister_eval_kind removes it again (a test's kind, when the test ends).
void register_eval_kind(const EvalKind& k);
void unregister_eval_kind(const std::string& name);

}  // namespace qkv::train
