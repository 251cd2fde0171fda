#include "generation/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "core/error.h"
#include "generation/finite_logits.h"

namespace qkv::nn {

void check_sample_options(const SampleOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw Error("sampling: temperature must be finite and >= 0, got " +
                std::to_string(o.temperature));
  if (o.top_k && *o.top_k < 1)
    throw Error("sampling: top_k must be >= 1 (or unset for all tokens), got " +
                std::to_string(*o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw Error("sampling: top_p must be in (0, 1], got " + std::to_string(o.top_p));
  if (o.max_new_tokens < 0)
    throw Error("sampling: max_new_tokens must be >= 0, got " + std::to_string(o.max_new_tokens));
}

int64_t sample_token(const real* logits, int64_t V, const SampleOptions& opt, Generator& gen,
                     SampleScratch& sc) {
  if (V < 1) throw Error("sample_token: no logits to sample from (V = " + std::to_string(V) + ")");
  check_finite_logits(logits, V, "sample_token");
  if (opt.temperature == 0) {  // greedy: the first largest logit
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (logits[v] > logits[best]) best = v;
    return best;
  }
  sc.prob.resize(static_cast<size_t>(V));
  sc.order.resize(static_cast<size_t>(V));
  // Unnormalised probabilities exp((z - max z) / T), computed in double so a
  // tiny temperature underflows to exact zeros rather than overflowing.
  real zmax = logits[0];
  for (int64_t v = 1; v < V; ++v) zmax = std::max(zmax, logits[v]);
  for (int64_t v = 0; v < V; ++v)
    sc.prob[v] =
        static_cast<real>(std::exp((static_cast<double>(logits[v]) - zmax) / opt.temperature));
  // Tokens from most to least likely (ties: lower id first); only the first
  // `keep` are candidates.
  for (int64_t v = 0; v < V; ++v) sc.order[v] = v;
  int64_t keep = opt.top_k ? std::min<int64_t>(*opt.top_k, V) : V;
  auto likelier = [&](int64_t a, int64_t b) {
    return sc.prob[a] > sc.prob[b] || (sc.prob[a] == sc.prob[b] && a < b);
  };
  std::partial_sort(sc.order.begin(), sc.order.begin() + keep, sc.order.end(), likelier);
  if (opt.top_p < 1) {
    // Nucleus: the shortest prefix of the sorted candidates whose share of
    // their total probability reaches top_p.
    double total = 0;
    for (int64_t i = 0; i < keep; ++i) total += sc.prob[sc.order[i]];
    double cum = 0;
    int64_t n = 0;
    while (n < keep) {
      cum += sc.prob[sc.order[n++]];
      if (cum >= opt.top_p * total) break;
    }
    keep = n;
  }
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += sc.prob[sc.order[i]];
  // Inverse CDF over the candidates, most likely first.
  const double u = gen.uniform() * total;
  double cum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    cum += sc.prob[sc.order[i]];
    if (u < cum) return sc.order[i];
  }
  return sc.order[keep - 1];  // u within rounding of the total
}

std::vector<std::vector<int64_t>> generate(GPT& model, const Tokens& prompt,
                                           const SampleOptions& opt, Generator& gen) {
  prompt.check("generate");
  check_sample_options(opt);
  const int64_t B = prompt.batch;
  if (model.cfg.vocab < 1)
    throw Error("generate: the model's vocabulary is empty (cfg.vocab = " +
                std::to_string(model.cfg.vocab) + ")");
  const std::vector<int64_t> len = prompt.full_lengths();
  int64_t shortest = prompt.len, longest = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (len[b] < 1)
      throw Error("generate: prompt " + std::to_string(b) + " is empty (needs >= 1 token)");
    shortest = std::min(shortest, len[b]);
    longest = std::max(longest, len[b]);
  }
  const int64_t vocab = model.cfg.vocab;
  for (int64_t id : opt.suppress)
    if (id < 0 || id >= vocab)
      throw Error("generate: suppress holds token id " + std::to_string(id) +
                  ", outside the vocabulary [0, " + std::to_string(vocab) + ")");
  if (static_cast<int64_t>(std::set<int64_t>(opt.suppress.begin(), opt.suppress.end()).size()) >=
      vocab)
    throw Error("generate: suppress holds every one of the " + std::to_string(vocab) + " tokens");
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  if (B == 0 || opt.max_new_tokens == 0) return out;
  // Positions fed: each prompt, then all but the last generated token.
  const int64_t capacity = longest + opt.max_new_tokens - 1;
  if (capacity > model.cfg.max_positions)
    throw Error("generate: prompt length " + std::to_string(longest) + " + max_new_tokens " +
                std::to_string(opt.max_new_tokens) + " - 1 exceeds the model's max_positions " +
                std::to_string(model.cfg.max_positions));
  NoGradGuard no_grad;
  // Every row advances one position per step, the same in both paths, so that
  // they draw from `gen` in the same order (position by position, rows in
  // order) and a seed gives the same text with the cache and without.
  //   cached:   the prefix all prompts share in length goes into the cache as one
  //             block (prefill); after that each step feeds every running row one
  //             token, its next prompt token or its last sample (forward_step).
  //   uncached: a row's logits for position pos come from its whole sequence
  //             [0, pos) through the model (GPT::forward), only when it draws.
  KVCache cache;
  Tensor logits;  // cached: (rows, n, V), row r's position pos - 1 at its last of n
  int64_t n = shortest;
  std::vector<std::vector<int64_t>> seq(static_cast<size_t>(B));  // uncached: each row so far
  for (int64_t b = 0; b < B; ++b)
    seq[b].assign(prompt.ids.begin() + b * prompt.len,
                  prompt.ids.begin() + b * prompt.len + len[b]);
  if (opt.use_cache) {
    cache = start_generation(model, B, capacity);
    std::vector<int64_t> ids(static_cast<size_t>(B * shortest));
    for (int64_t b = 0; b < B; ++b)
      std::copy(seq[b].begin(), seq[b].begin() + shortest, ids.begin() + b * shortest);
    logits = forward_step(model, cache, ids, shortest);  // (B, shortest, V)
  }
  std::vector<int64_t> row(static_cast<size_t>(B));  // row r generates for prompt row[r]
  for (int64_t b = 0; b < B; ++b) row[b] = b;
  std::vector<int64_t> keep, next;
  SampleScratch scratch;
  for (int64_t pos = shortest;; ++pos) {  // the logits predict position pos
    keep.clear();
    next.clear();
    for (int64_t r = 0; r < static_cast<int64_t>(row.size()); ++r) {
      const int64_t b = row[r];
      int64_t tok;
      if (pos < len[b]) {
        tok = seq[b][pos];  // still reading the prompt
      } else {
        real* lr;  // this row's logits for position pos (V)
        int64_t V;
        if (opt.use_cache) {
          V = logits.size(2);  // the row width, whatever cfg says
          lr = logits.data() + (r * n + n - 1) * V;
        } else {
          const Tokens whole{seq[b], 1, pos, {}};
          logits = model.forward(whole).data();  // (1, pos, V)
          V = logits.size(2);
          lr = logits.data() + (pos - 1) * V;
        }
        for (int64_t id : opt.suppress) lr[id] = -std::numeric_limits<real>::infinity();
        tok = sample_token(lr, V, opt, gen, scratch);
        out[b].push_back(tok);
        if ((opt.eos && tok == *opt.eos) ||
            static_cast<int64_t>(out[b].size()) == opt.max_new_tokens)
          continue;  // row b is done
        if (!opt.use_cache) seq[b].push_back(tok);
      }
      keep.push_back(r);
      next.push_back(tok);
    }
    if (keep.empty()) break;
    if (keep.size() != row.size()) {
      if (opt.use_cache) cache.reorder(keep);
      for (size_t i = 0; i < keep.size(); ++i) row[i] = row[keep[i]];
      row.resize(keep.size());
    }
    if (opt.use_cache) {
      logits = forward_step(model, cache, next);  // (rows, 1, V)
      n = 1;
    }
  }
  return out;
}

}  // namespace qkv::nn
