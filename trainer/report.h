// The trainer's printed and drawn reports (internal to trainer/run.cpp and
// trainer/report.cpp): the run's header, held-out results, samples, answers
// to --ask, the cross-attention picture, and the plots.
#pragma once
#include <string>
#include <vector>

#include "trainer/run.h"

namespace qkv::train {

struct History {
  std::vector<double> steps, losses, eval_steps,
      eval_accs;  // eval_accs: a loss for a language model
  double train_seconds = 0, eval_seconds = 0, allreduce_seconds = 0;
  int64_t tokens = 0, first_step = 0;
  int stopped_by = 0;  // the signal that ended training early, or 0
};

void print_header(const Trainer& t, const RunOptions& o);
// --temperature, --top-k, --top-p as nn::SampleOptions (checked).
nn::SampleOptions sampling(const RunOptions& o);
// "exact 99.50%, token 99.90%, BLEU 99.71, perplexity 1.012" or "loss 1.2345, perplexity 3.437".
std::string eval_line(const EvalResult& r);
// Held-out results, a few examples and the length-generalisation check.
EvalResult final_report(Trainer& t, const RunOptions& o);
// --ask: answers each line (the text, or stdin's for "-"); a language model continues it.
int ask(Trainer& t, const RunOptions& o);
// Prints the cross-attention of the first held-out source (encoder-decoder only).
void print_first_attention(Trainer& t, const EvalResult& r);
// loss.svg and attention.svg, after the checkpoint; *written gets the names
// of the files written. Each failure is reported; returns false if any happened.
bool write_plots(Trainer& t, const RunOptions& o, const History& h, const EvalResult& r,
                 std::vector<std::string>* written);
std::string run_name(const TrainConfig& c);

}  // namespace qkv::train
