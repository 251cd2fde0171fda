// The mixture of experts' routing decisions (nn/moe.h): each token's top k
// experts, the capacity of a training step and the drops. They are choices,
// constants for the gradient: nn/moe.cpp holds the ops that differentiate
// around them (docs/moe-backward.md).
#include "nn/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace qkv::nn {

// ============================================================================
// The routing decisions
// ============================================================================

std::string moe_settings_problem(const MoESettings& s) {
  if (s.experts < 2)
    return "experts " + std::to_string(s.experts) + ": a mixture needs at least 2 experts";
  if (s.experts_per_token < 1 || s.experts_per_token > s.experts)
    return "experts per token " + std::to_string(s.experts_per_token) + ": must be in 1.." +
           std::to_string(s.experts) + " (the number of experts)";
  if (!(s.capacity_factor > 0) || !std::isfinite(s.capacity_factor))
    return "capacity factor " + std::to_string(s.capacity_factor) + ": must be a positive number";
  if (!(s.aux_loss >= 0) || !std::isfinite(s.aux_loss))
    return "aux loss " + std::to_string(s.aux_loss) + ": must be a number >= 0";
  return "";
}

int64_t moe_capacity(const MoESettings& s, int64_t N) {
  return static_cast<int64_t>(
      std::ceil(s.capacity_factor * double(N) * double(s.experts_per_token) / double(s.experts)));
}

namespace {
// The k experts of largest probability pn[0..E), largest first, into out[0..k):
// a tie goes to the lower index, and a NaN ranks below every number (so the
// order is a strict one). Three ways to the same choice, by k: one pass for
// k = 1 (Switch); insertion into the running top k, its values beside it,
// for k <= 16 (O(E k)); a partial sort of the E indices above (O(E log k)).
// `order` is scratch of E entries.
void top_k_experts(const real* pn, int64_t E, int64_t k, int32_t* out,
                   std::vector<int32_t>& order) {
  auto key = [pn](int32_t e) {
    return std::isnan(pn[e]) ? -std::numeric_limits<real>::infinity() : pn[e];
  };
  if (k == 1) {
    int32_t best = 0;
    for (int32_t e = 1; e < E; ++e)
      if (key(e) > key(best)) best = e;
    out[0] = best;
    return;
  }
  if (k <= 16) {
    real top[16];
    int64_t filled = 0;
    for (int32_t e = 0; e < E; ++e) {
      const real v = key(e);
      if (filled == k && !(v > top[k - 1])) continue;  // a tie stays with the lower index
      int64_t i = filled < k ? filled++ : k - 1;
      for (; i > 0 && v > top[i - 1]; --i) {
        top[i] = top[i - 1];
        out[i] = out[i - 1];
      }
      top[i] = v;
      out[i] = e;
    }
    return;
  }
  for (int32_t e = 0; e < E; ++e) order[e] = e;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    const real ka = key(a), kb = key(b);
    return ka > kb || (ka == kb && a < b);
  });
  std::copy(order.begin(), order.begin() + k, out);
}
}  // namespace

MoERouting moe_route(const Tensor& P, const MoESettings& s, bool capacity_applies) {
  const int64_t N = P.size(0), E = P.size(1), k = s.experts_per_token;
  MoERouting r;
  r.N = N;
  r.E = E;
  r.k = k;
  // At inference every assignment is kept: an expert takes at most every token once.
  r.capacity = capacity_applies ? moe_capacity(s, N) : N;
  r.expert.resize(N * k);
  r.kept.assign(N * k, 0);
  r.rows.resize(E);
  r.slots.resize(E);
  r.chosen.assign(E, 0);
  const real* p = P.data();
  // The top k of each row (top_k_experts: largest first, ties to the lower index).
  std::vector<int32_t> order(k > 16 ? E : 0);
  for (int64_t n = 0; n < N; ++n) {
    int32_t* out = r.expert.data() + n * k;
    top_k_experts(p + n * E, E, k, out, order);  // (E) -> (k)
    for (int64_t c = 0; c < k; ++c) ++r.chosen[out[c]];
  }
  // Capacity, claimed by rank and then by token: all first choices in token
  // order, then all second choices, ...
  for (int64_t e = 0; e < E; ++e) {
    r.rows[e].reserve(std::min(r.capacity, r.chosen[e]));
    r.slots[e].reserve(std::min(r.capacity, r.chosen[e]));
  }
  for (int64_t c = 0; c < k; ++c)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t slot = n * k + c;
      const int32_t e = r.expert[slot];
      if (int64_t(r.rows[e].size()) < r.capacity) {
        r.kept[slot] = 1;
        r.rows[e].push_back(n);
        r.slots[e].push_back(slot);
      } else {
        ++r.dropped;
      }
    }
  return r;
}

}  // namespace qkv::nn
