// A diagnosis in words from the training instruments' records
// (trainer/instruments.h): the well-known pathologies, each a numbered rule
// with a documented threshold (docs/instruments.md derives them), named with
// the number that triggered it.
//   1  update-to-data ratio far from 1e-3: a weight matrix's median
//      log10(std(dw)/std(w)) over the records outside [-3 - 1.5, -3 + 1.5]
//   2  dead units: a feed-forward block's dead fraction at the last record
//      above 0.25
//   3  collapsed attention: a head's mean entropy at the last record below
//      0.1 nats while its rows have 4 or more keys
//   4  gradient-norm spike: a record's global gradient norm over 10 times the
//      median of the records before it (at least 3), or a divergence
//      following records whose norm grew 10 times from the first
//   5  held-out loss rising past its best: the keep-best check's (a later
//      held-out loss above the lowest one; heldout_rose)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace qkv::train {

struct DiagnosisThresholds {
  double ratio_centre = -3, ratio_decades = 1.5;  // rule 1
  double dead_fraction = 0.25;                    // rule 2
  double collapsed_nats = 0.1;                    // rule 3
  int64_t collapsed_min_keys = 4;                 // rule 3
  double spike_factor = 10;                       // rule 4
  int64_t spike_min_before = 3;                   // rule 4
};

struct Finding {
  int rule = 0;      // 1..5
  std::string text;  // "rule 1: ...": the layer, the number and the threshold
};

// The keep-best check (trainer/run.cpp's keep_best and its report): the
// held-out loss at the end is above the best one, at a later step.
inline bool heldout_rose(double best_loss, int64_t best_step, double final_loss,
                         int64_t final_step) {
  return best_step >= 0 && final_loss > best_loss && final_step > best_step;
}

// The findings of `records` (instruments.jsonl's lines, in order).
// `diverged_at`: the step at which training diverged (0: it did not, unless
// a record {"step": s, "diverged": true} says so).
std::vector<Finding> diagnose(const std::vector<nlohmann::json>& records, int64_t diverged_at = 0,
                              const DiagnosisThresholds& th = {});

}  // namespace qkv::train
