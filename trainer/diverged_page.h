// "Which op made this NaN": what the rerun of a diverged step found
// (Trainer::rerun_diverged_step), in one line for stderr and as a page,
// diverged.html in the run's folder (docs/instruments.md, "Which op made
// this NaN"). The page is written by the float32 process that diverged, and
// says so: its numbers carry no float64 finite-difference proof.
//
//   DivergedStep d = t.rerun_diverged_step();
//   std::fprintf(stderr, "%s\n", d.said().c_str());
//   write_diverged_page(d, out_dir);                      // out_dir/diverged.html
//
// A program that catches qkv::AnomalyError itself can make the page too:
//   DivergedStep d = diverged_at_op(e, step);  diverged_page_html(d, "");
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/anomaly.h"

namespace qkv::train {

struct DivergedStep {
  enum class Cause {
    Op,         // an op's output (forward) or gradient (backward) was the first NaN or Inf
    Weights,    // a parameter held a NaN or Inf before the step's forward: an update made it
    Input,      // a leaf the forward read that is no parameter (the data) held one
    Optimizer,  // no op made a NaN or Inf: the loss exploded on finite numbers
  };
  int64_t step = 0;
  std::string stopped;  // what stopped the run (the Diverged message); may be ""
  Cause cause = Cause::Optimizer;
  // Op: the op; Weights and Input: the first op that read the bad leaf.
  std::optional<AnomalyError> anomaly;
  // Weights: every parameter holding a NaN or Inf, by its named_parameters() name.
  std::vector<std::pair<std::string, TensorStats>> bad_params;
  double loss = 0;  // Optimizer: the rerun's loss (finite)
  // Optimizer: the parameters with the largest |w|, largest first (at most
  // 5), the weights the updates grew furthest.
  std::vector<std::pair<std::string, TensorStats>> largest_params;

  // The line the trainer prints after "step N rerun in detect-anomaly mode (float32): ".
  std::string said() const;
};

// The DivergedStep of an AnomalyError caught at `step`: Cause::Op, or
// Cause::Input when the error is a leaf's value (no parameter names known).
DivergedStep diverged_at_op(const AnomalyError& e, int64_t step);

// The page: plain HTML with inline CSS. `docs_base`: a URL under which the
// op's docs/ page is found (explorer::docs_url_beside_build()); "" shows the
// page's path as text.
std::string diverged_page_html(const DivergedStep& d, const std::string& docs_base);

// Writes diverged_page_html (docs linked beside the build) to
// dir/diverged.html, atomically; returns its path. Throws qkv::Error naming
// the file when it cannot be written.
std::string write_diverged_page(const DivergedStep& d, const std::string& dir);

}  // namespace qkv::train
