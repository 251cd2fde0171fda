// The training instruments (--instruments N; docs/instruments.md): every N
// steps, what makemore part 3 plots and TensorBoard's histograms show, as
// one JSON line per watched step in the run's folder (instruments.jsonl):
//   per parameter   the gradient norm (before clipping) and the update-to-data
//                   ratio log10(std(dw) / std(w)), dw the optimizer's change
//   per FFN block   mean and std of the hidden units, their histogram, the
//                   fraction of dead units
//   per attention   mean and std of its output, the entropy of each head's
//                   rows, the fraction of saturated rows (max p > 0.99)
// The layers report through nn::Probe (nn/probe.h), set on the model for
// the watched step's forward only; an unwatched step pays one null test per
// layer. The Trainer calls, in step():
//   watch(s) ... forward ... unwatch() ... backward ... gradients()
//   ... clipping, optimizer step ... updated(loss, lr)
#pragma once
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/module.h"
#include "nn/probe.h"

namespace qkv::train {

// The thresholds the instruments use (docs/instruments.md derives them).
// A ReLU unit is dead when it is 0 for every token of the batch; a GELU unit
// when its input is below -3 for every token (gelu'(-3) = -0.012); a SwiGLU
// unit when its gate's input is below -6 for every token (silu'(-6) = -0.012,
// the same vanishing slope).
inline constexpr double kGeluDeadBelow = -3;
inline constexpr double kSwigluDeadBelow = -6;
inline constexpr double kSaturatedMaxProb = 0.99;  // a softmax row is saturated past it
inline constexpr int kHistogramBins = 40;

class Instruments : public nn::Probe {
 public:
  // Watches `model` every `every` steps (> 0), appending a JSON line per
  // watched step to `path` ("" keeps the lines in memory only); `append`
  // keeps an existing file's lines up to step `resumed_at` (a resumed run:
  // lines of later steps, written after the checkpoint it resumes from, are
  // dropped, since the run makes those steps again). Throws Error naming the
  // file when it cannot be opened.
  Instruments(nn::Module& model, int64_t every, const std::string& path, bool append = false,
              int64_t resumed_at = std::numeric_limits<int64_t>::max());
  ~Instruments() override;

  bool due(int64_t step) const { return step % every_ == 0; }
  int64_t every() const { return every_; }
  void watch(int64_t step);  // sets the probe on the model for step `step`'s forward
  void unwatch();            // takes it off again (after the forward)
  // After backward (and the gradient allreduce), before clipping: each
  // parameter's gradient norm, and a copy of its values for updated().
  void gradients();
  // After the optimizer's step: the update ratios; writes the step's line.
  void updated(double loss, double lr, double grad_norm);
  // A held-out evaluation (a line {"step", "heldout_loss"}).
  void heldout(int64_t step, double loss);
  // Training diverged at `step` (a line {"step", "diverged": true}).
  void diverged(int64_t step);

  // Every line written so far by this process (and an appended file's).
  const std::vector<nlohmann::json>& records() const { return records_; }

  void ffn_hidden(const nn::Module& m, const Tensor& pre, const Tensor& post,
                  nn::Activation act) override;
  void attention(const nn::Module& m, const Tensor& probs, const Tensor& out) override;

 private:
  void write(const nlohmann::json& line);
  std::string name_of(const nn::Module& m) const;

  nn::Module& model_;
  int64_t every_, step_ = 0;
  std::string path_;
  std::ofstream file_;
  std::map<const nn::Module*, std::string> names_;   // every module's dotted name
  std::vector<std::pair<std::string, Var>> params_;  // named_parameters()
  std::vector<Tensor> before_;                       // w before the update, watched steps only
  nlohmann::json params_json_, layers_json_;
  std::vector<nlohmann::json> records_;
};

// The lines of an instruments.jsonl file; Error naming the file and line.
std::vector<nlohmann::json> read_instruments(const std::string& path);

}  // namespace qkv::train
