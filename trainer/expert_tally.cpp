#include "trainer/expert_tally.h"

#include <cstdio>

namespace qkv::train {

void ExpertTally::add_step(const std::vector<const nn::MoERouting*>& routings, real aux_loss) {
  last_aux_loss = aux_loss;
  last_counts.assign(last_counts.size(), 0);
  for (const nn::MoERouting* r : routings) {
    counts.resize(size_t(r->E), 0);
    last_counts.resize(size_t(r->E), 0);
    for (int64_t e = 0; e < r->E; ++e) {
      counts[size_t(e)] += int64_t(r->rows[e].size());
      last_counts[size_t(e)] += int64_t(r->rows[e].size());
    }
    dropped += r->dropped;
    assignments += r->N * r->k;
  }
}

static std::vector<double> shares_of(const std::vector<int64_t>& counts) {
  double kept = 0;
  for (int64_t n : counts) kept += double(n);
  std::vector<double> out;
  for (int64_t n : counts) out.push_back(kept > 0 ? double(n) / kept : 0);
  return out;
}

std::vector<double> ExpertTally::last_shares() const { return shares_of(last_counts); }

std::string ExpertTally::summary() const {
  const std::vector<double> share = shares_of(counts);
  std::string shares;
  for (size_t e = 0; e < share.size(); ++e) {
    char b[48];
    std::snprintf(b, sizeof b, "%s%zu %.1f%%", e ? ", " : "", e, 100 * share[e]);
    shares += b;
  }
  char tail[200];
  std::snprintf(tail, sizeof tail,
                "; %lld of %lld assignments dropped over capacity (%.2f%%); last load-balancing "
                "loss %.4f",
                (long long)dropped, (long long)assignments,
                assignments > 0 ? 100 * double(dropped) / double(assignments) : 0.0,
                double(last_aux_loss));
  return "experts over training: share of the kept assignments " + shares + tail;
}

}  // namespace qkv::train
