// The trainer's printed and drawn reports (internal to trainer/run.cpp and
// trainer/report.cpp): the run's header, held-out results, samples, answers
// to --ask, the cross-attention picture, and the plots.
#pragma once
#include <string>
#include <vector>

#include "trainer/qa_data.h"
#include "trainer/run.h"

namespace qkv::train {

struct History {
  std::vector<double> steps, losses, eval_steps,
      eval_accs;  // eval_accs: a loss for a language model
  double train_seconds = 0, eval_seconds = 0, allreduce_seconds = 0;
  int64_t tokens = 0, first_step = 0;
  int stopped_by = 0;  // the signal that ended training early, or 0
  // --experts: each step's share of the kept assignments per expert (experts.svg)
  std::vector<std::vector<double>> expert_shares;
};

void print_header(const Trainer& t, const RunOptions& o);
// --temperature, --top-k, --top-p as nn::SampleOptions (checked).
nn::SampleOptions sampling(const RunOptions& o);
// "exact 99.50%, token 99.90%, BLEU 99.71, perplexity 1.012" or "loss 1.2345,
// perplexity 3.437": the result's evaluation kind's line.
std::string eval_line(const EvalResult& r);
// The report after training: the experts' shares (--experts), then the
// run's evaluation kind's (trainer/eval_kinds.h).
EvalResult final_report(Trainer& t, const RunOptions& o);
// A few continuations sampled from the start of held-out windows (a language model).
void print_samples(Trainer& t, const RunOptions& o);
// Held-out results by one decoding method ("greedy", "beam"), timed in *seconds.
EvalResult timed_eval(Trainer& t, const std::string& method, const RunOptions& o, double* seconds);
// --long-lengths A-B, before any work: refused (one line naming the flag)
// without a built-in task, or when length B and its answer pass a learned
// position table or do not fit in memory.
void check_long_lengths(const Trainer& t, const RunOptions& o);
// --ask: answers each line (the text, or stdin's for "-"); a language model continues it.
int ask(Trainer& t, const RunOptions& o);
// Prints the cross-attention of the first held-out source (encoder-decoder only).
void print_first_attention(Trainer& t, const EvalResult& r);
// loss.svg and attention.svg, after the checkpoint; *written gets the names
// of the files written. Each failure is reported; returns false if any happened.
bool write_plots(Trainer& t, const RunOptions& o, const History& h, const EvalResult& r,
                 std::vector<std::string>* written);
std::string run_name(const TrainConfig& c);
// --count-tokens: each split's sequences in tokens as the model reads them
// (with <s> and </s>): count, shortest, median, 90th percentile, longest,
// and how many exceed o.count_window (the --context given; 0: none given).
void count_tokens(const Trainer& t, const RunOptions& o);
// An evaluation whose loss is NaN or Inf measured nothing: Error naming
// `what` (the set), so that no NaN accuracy is reported with exit status 0.
void check_finite_result(const EvalResult& r, const std::string& what);

// A classifier's (trainer/classify_report.cpp): held-out accuracy and the
// confusion matrix, then the test set scored once; --ask's label and its
// probability for an image (PNG) or a text; the confusion matrix as SVG.
EvalResult classifier_report(Trainer& t, const RunOptions& o);
void ask_classifier(Trainer& t, const std::string& input);
// A classifier's input as a pair's source: a PNG's pixels (vit), or "<s>
// text </s>" (bert); errors name `flag`.
Seq classifier_input(Trainer& t, const std::string& input, const std::string& flag);
// "<s> text with [MASK] </s>" as ids, each [MASK] the mask token's id (a
// space before it is the masked word's own); errors name `flag`.
Seq masked_input(Trainer& t, const std::string& text, const std::string& flag);
// --ask "a [MASK] game" to a masked language model: the likeliest tokens for each mask.
void ask_masked(Trainer& t, const std::string& text);
// --ask "question" --passage FILE to a question-answering model (bert's qa,
// trainer/eval_qa.cpp): the best span of the passage over its windows, and
// its score (start logit + end logit).
void ask_qa(Trainer& t, const std::string& question, const std::string& passage);
// What --ask and --explain read of a question on a passage: the answer, the
// window that holds it (its ids) and the span's positions there. Errors name
// `flag` (and --passage).
struct QaPick {
  QaAnswer answer;
  Seq ids;
  int64_t start = 0, end = 0, windows = 0, window_tokens = 0;
};
QaPick qa_pick(Trainer& t, const std::string& question, const std::string& passage,
               const std::string& flag);
// The class token's attention over the patches, per layer, drawn over a few
// test images (vit): the run's class_attention.svg.
void write_class_attention_svg(Trainer& t, const std::string& path, const std::string& title);
void write_confusion_svg(const Trainer& t, const EvalResult& r, const std::string& path,
                         const std::string& title);

}  // namespace qkv::train
