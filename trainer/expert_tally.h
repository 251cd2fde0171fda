// A mixture of experts' counters over a run (--experts): after each training
// step, the routings of its MoE layers are added here, so that the log has
// each step's share per expert and the final report the shares and drops
// over this process's steps. The trainer's step holds one and adds to it;
// it counts nothing else.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/moe.h"

namespace qkv::train {

struct ExpertTally {
  // The last step's load-balancing loss (nn::Model::aux_loss, before its
  // --aux-loss coefficient, the ranks' mean).
  real last_aux_loss = 0;
  // Kept assignments per expert, summed over the MoE layers: over this
  // process's steps and over the last step; the assignments dropped over
  // capacity and all assignments (this rank's tokens) since the process began.
  std::vector<int64_t> counts, last_counts;
  int64_t dropped = 0, assignments = 0;

  // One training step's routings (Model::routings()) and its aux loss.
  void add_step(const std::vector<const nn::MoERouting*>& routings, real aux_loss);
  bool any() const { return assignments > 0; }
  // Each expert's share of the last step's kept assignments (sums to 1);
  // empty before the first step.
  std::vector<double> last_shares() const;
  // "experts over training: share of the kept assignments 0 51.2%, 1 48.8%;
  // 3 of 96 assignments dropped over capacity (3.12%); last load-balancing
  // loss 1.0012" (no newline).
  std::string summary() const;
};

}  // namespace qkv::train
