// Corpus BLEU over token ids (trainer/bleu.h).
#include "trainer/bleu.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/error.h"

namespace qkv::train {

namespace {
using Ngram = std::vector<int64_t>;

// Every n-gram of s (n = 1..4) with how often it occurs.
std::map<Ngram, int64_t> ngram_counts(const std::vector<int64_t>& s) {
  std::map<Ngram, int64_t> counts;
  for (int n = 1; n <= BleuStats::kMaxOrder; ++n)
    for (size_t i = 0; i + static_cast<size_t>(n) <= s.size(); ++i)
      counts[Ngram(s.begin() + static_cast<std::ptrdiff_t>(i),
                   s.begin() + static_cast<std::ptrdiff_t>(i) + n)]++;
  return counts;
}
}  // namespace

double BleuStats::precision(int n) const {
  if (n < 1 || n > kMaxOrder)
    throw Error("BleuStats::precision: order " + std::to_string(n) + " is not in 1..4");
  const int64_t total = totals[static_cast<size_t>(n - 1)];
  return total ? double(matches[static_cast<size_t>(n - 1)]) / double(total) : 0.0;
}

double BleuStats::brevity_penalty() const {
  if (hyp_len >= ref_len) return 1.0;
  if (hyp_len == 0) return 0.0;
  return std::exp(1.0 - double(ref_len) / double(hyp_len));
}

double BleuStats::score() const {
  double log_sum = 0;
  for (int n = 1; n <= kMaxOrder; ++n) {
    const double p = precision(n);
    if (p == 0) return 0.0;  // no smoothing: one empty order makes the geometric mean 0
    log_sum += std::log(p);
  }
  return 100.0 * brevity_penalty() * std::exp(log_sum / kMaxOrder);
}

BleuStats bleu_stats(const std::vector<std::vector<int64_t>>& hyps,
                     const std::vector<std::vector<int64_t>>& refs) {
  if (hyps.size() != refs.size())
    throw Error("bleu_stats: " + std::to_string(hyps.size()) + " hypotheses but " +
                std::to_string(refs.size()) + " references");
  BleuStats st;
  for (size_t i = 0; i < hyps.size(); ++i) {
    const auto& h = hyps[i];
    st.hyp_len += static_cast<int64_t>(h.size());
    st.ref_len += static_cast<int64_t>(refs[i].size());
    const std::map<Ngram, int64_t> ref = ngram_counts(refs[i]);
    for (const auto& [gram, count] : ngram_counts(h)) {
      const size_t k = gram.size() - 1;
      st.totals[k] += count;
      const auto it = ref.find(gram);
      if (it != ref.end()) st.matches[k] += std::min(count, it->second);  // clipped
    }
  }
  return st;
}

double corpus_bleu(const std::vector<std::vector<int64_t>>& hyps,
                   const std::vector<std::vector<int64_t>>& refs) {
  return bleu_stats(hyps, refs).score();
}

}  // namespace qkv::train
