// Corpus BLEU (Papineni et al. 2002) over token ids, computed as the
// standard scorer does it: sacrebleu's corpus_bleu with smooth_method='none'
// and one reference per hypothesis, on the model's own tokens (no
// re-tokenisation).
//
//   p_n  = sum over sentences of clipped n-gram matches
//          / sum over sentences of the hypothesis's n-grams      (n = 1..4)
//          (clipped: an n-gram counts at most as often as in the reference)
//   BP   = 1 if c >= r, else exp(1 - r / c) (0 when c = 0)
//          c = total hypothesis length, r = total reference length
//   BLEU = 100 * BP * exp((log p_1 + log p_2 + log p_3 + log p_4) / 4)
//
// With no smoothing, a corpus without a single matching n-gram of some order
// (or with no n-gram of that order at all, e.g. empty) scores 0.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace qkv::train {

struct BleuStats {
  static constexpr int kMaxOrder = 4;
  // matches[n-1]: clipped n-gram matches; totals[n-1]: hypothesis n-grams.
  std::array<int64_t, kMaxOrder> matches{}, totals{};
  int64_t hyp_len = 0, ref_len = 0;  // c and r, in tokens

  double precision(int n) const;   // p_n in [0, 1]; 0 when there is no n-gram
  double brevity_penalty() const;  // BP in [0, 1]
  double score() const;            // BLEU in [0, 100]
};

// Counts over a corpus; hyps[i] is scored against refs[i] (sizes must agree).
BleuStats bleu_stats(const std::vector<std::vector<int64_t>>& hyps,
                     const std::vector<std::vector<int64_t>>& refs);
// The corpus BLEU of hyps against refs, in [0, 100].
double corpus_bleu(const std::vector<std::vector<int64_t>>& hyps,
                   const std::vector<std::vector<int64_t>>& refs);

}  // namespace qkv::train
