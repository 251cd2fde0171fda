// The training instruments' pictures (docs/instruments.md), drawn from the
// records (trainer/instruments.h) as SVG like the run's other plots
// (trainer/plots.h), and an index.html that shows them with loss.svg and
// attention.svg:
//   update_ratio.svg  log10(std(dw)/std(w)) per weight matrix over the steps,
//                     with the 1e-3 guide line
//   grad_norm.svg     each parameter's gradient norm over the steps (log)
//   activations.svg   the feed-forward blocks' hidden units: histograms at up
//                     to four watched steps
//   entropy.svg       each attention head's mean entropy over the steps, with
//                     log(S), the uniform row's, dashed
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "trainer/diagnosis.h"

namespace qkv::train {

// Writes the four pictures and index.html into `dir` (each atomically);
// returns the names written. The index lists `findings` in words.
std::vector<std::string> write_instrument_pictures(const std::vector<nlohmann::json>& records,
                                                   const std::string& dir,
                                                   const std::vector<Finding>& findings);

class Instruments;
// The end of a run with --instruments (diverged_at: the step that diverged,
// or 0): prints the diagnosis, then writes the pictures and index.html into
// `dir`. Returns false (after a warning on stderr) when a file failed.
bool finish_instruments(const Instruments& ins, const std::string& dir, int64_t diverged_at);

}  // namespace qkv::train
