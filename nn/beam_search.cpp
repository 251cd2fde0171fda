#include "nn/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/reduce.h"

namespace qkv::nn {

double length_penalty(int64_t len, double alpha) {
  return std::pow((5.0 + static_cast<double>(len)) / 6.0, alpha);
}

namespace {

void check_options(const BeamOptions& o, int64_t V) {
  if (o.beam < 1) throw Error("beam_search: beam must be >= 1, got " + std::to_string(o.beam));
  if (!(o.alpha >= 0) || !std::isfinite(o.alpha))
    throw Error("beam_search: alpha must be finite and >= 0, got " + std::to_string(o.alpha));
  if (o.max_len < 1) throw Error("beam_search: max_len must be >= 1, got " + std::to_string(o.max_len));
  if (V < 1) throw Error("beam_search: vocabulary size must be >= 1, got " + std::to_string(V));
  for (int64_t id : {o.bos, o.eos, o.pad})
    if (id < 0 || id >= V)
      throw Error("beam_search: special token id " + std::to_string(id) + " outside the vocabulary [0, " +
                  std::to_string(V) + ")");
}

constexpr double kDead = -std::numeric_limits<double>::infinity();

// One source's search state. Live hypothesis j has logp[j] (kDead: an empty
// slot) and tokens tok[j * max_len, j * max_len + t).
struct SourceState {
  std::vector<double> logp, next_logp;
  std::vector<int64_t> tok, next_tok;
  std::vector<BeamHypothesis> finished;  // best first, at most `beam`

  // Keeps the best `beam` finished hypotheses; among equal scores the earlier stays first.
  void finish(const int64_t* tokens, int64_t n, double lp, double score, bool eos, int64_t beam) {
    if (static_cast<int64_t>(finished.size()) == beam && score <= finished.back().score) return;
    auto at = std::upper_bound(finished.begin(), finished.end(), score,
                               [](double s, const BeamHypothesis& h) { return s > h.score; });
    finished.insert(at, BeamHypothesis{std::vector<int64_t>(tokens, tokens + n), lp, score, eos});
    if (static_cast<int64_t>(finished.size()) > beam) finished.pop_back();
  }
};

}  // namespace

std::vector<BeamHypothesis> beam_search(int64_t sources, int64_t V, const BeamOptions& opt,
                                        const BeamStep& step) {
  check_options(opt, V);
  if (sources < 0) throw Error("beam_search: negative number of sources " + std::to_string(sources));
  const int64_t k = opt.beam, L = opt.max_len;
  std::vector<SourceState> state(static_cast<size_t>(sources));
  for (SourceState& s : state) {
    // Only hypothesis 0 starts live: k copies of <bos> would give k equal beams.
    s.logp.assign(static_cast<size_t>(k), kDead);
    s.logp[0] = 0;
    s.next_logp.resize(static_cast<size_t>(k));
    s.tok.assign(static_cast<size_t>(k * L), opt.pad);
    s.next_tok.assign(static_cast<size_t>(k * L), opt.pad);
  }
  std::vector<int64_t> running(static_cast<size_t>(sources));  // row block a decodes source running[a]
  for (int64_t s = 0; s < sources; ++s) running[s] = s;
  std::vector<int64_t> from, ids(static_cast<size_t>(sources * k), opt.bos);
  std::vector<int64_t> next_running, next_from, next_ids;
  std::vector<real> row(static_cast<size_t>(V));
  // Candidates (summed log-prob, index j * V + v) of one source.
  std::vector<std::pair<double, int64_t>> cand;
  cand.reserve(static_cast<size_t>(k * V));
  auto better = [](const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };

  for (int64_t t = 1; t <= L && !running.empty(); ++t) {
    const int64_t R = static_cast<int64_t>(running.size()) * k;
    Tensor logits = step(from, ids);  // (R, V)
    if (logits.numel() != R * V)
      throw Error("beam_search: the step returned " + to_string(logits.shape()) + " logits for " +
                  std::to_string(R) + " rows of vocabulary " + std::to_string(V));
    next_running.clear();
    next_from.clear();
    next_ids.clear();
    for (int64_t a = 0; a < static_cast<int64_t>(running.size()); ++a) {
      SourceState& s = state[running[a]];
      cand.clear();
      for (int64_t j = 0; j < k; ++j) {
        if (s.logp[j] == kDead) continue;
        const real* lg = logits.data() + (a * k + j) * V;
        std::copy(lg, lg + V, row.begin());
        log_softmax_rows(row.data(), 1, V);
        for (int64_t v = 0; v < V; ++v) cand.emplace_back(s.logp[j] + row[v], j * V + v);
      }
      const int64_t top = std::min<int64_t>(2 * k, static_cast<int64_t>(cand.size()));
      std::partial_sort(cand.begin(), cand.begin() + top, cand.end(), better);
      // The best k extensions not ending in <eos> stay live; an <eos> among the
      // best k candidates finishes its hypothesis (len t, counting the <eos>).
      int64_t live = 0;
      for (int64_t c = 0; c < top && live < k; ++c) {
        const int64_t j = cand[c].second / V, v = cand[c].second % V;
        const double lp = cand[c].first;
        if (lp == kDead) break;
        if (v == opt.eos && !opt.ignore_eos) {
          if (c < k) s.finish(&s.tok[j * L], t - 1, lp, lp / length_penalty(t, opt.alpha), true, k);
          continue;
        }
        std::copy(&s.tok[j * L], &s.tok[j * L] + (t - 1), &s.next_tok[live * L]);
        s.next_tok[live * L + t - 1] = v;
        s.next_logp[live] = lp;
        next_from.push_back(a * k + j);
        next_ids.push_back(v);
        ++live;
      }
      for (int64_t j = live; j < k; ++j) s.next_logp[j] = kDead;
      s.logp.swap(s.next_logp);
      s.tok.swap(s.next_tok);
      double best_live = kDead;
      for (int64_t j = 0; j < live; ++j) best_live = std::max(best_live, s.logp[j]);
      bool done = live == 0;
      if (t == L) {
        // The cap: the live hypotheses finish as they are (len t, no <eos>).
        for (int64_t j = 0; j < live; ++j)
          s.finish(&s.tok[j * L], t, s.logp[j], s.logp[j] / length_penalty(t, opt.alpha), false, k);
        done = true;
      } else if (static_cast<int64_t>(s.finished.size()) == k &&
                 best_live / length_penalty(t, opt.alpha) <= s.finished.back().score) {
        done = true;  // no live hypothesis beats the worst kept finished one
      }
      if (done) {
        next_from.resize(next_from.size() - live);
        next_ids.resize(next_ids.size() - live);
        continue;
      }
      // Pad the block to k rows with dead slots (their logits are ignored).
      for (int64_t j = live; j < k; ++j) {
        next_from.push_back(a * k);
        next_ids.push_back(opt.pad);
      }
      next_running.push_back(running[a]);
    }
    running.swap(next_running);
    from.swap(next_from);
    ids.swap(next_ids);
  }

  std::vector<BeamHypothesis> out(static_cast<size_t>(sources));
  for (int64_t s = 0; s < sources; ++s)
    if (!state[s].finished.empty()) out[s] = state[s].finished.front();
  return out;
}

std::vector<BeamHypothesis> beam_search(Seq2SeqTransformer& model, const Tokens& src,
                                        const BeamOptions& opt) {
  src.check("beam_search");
  check_options(opt, model.cfg.tgt_vocab);
  NoGradGuard no_grad;
  // k rows per source; positions fed: <bos> and at most max_len - 1 tokens.
  KVCache cache = start_decoding(model, src, opt.max_len, opt.beam);
  return beam_search(src.batch, model.cfg.tgt_vocab, opt,
                     [&](const std::vector<int64_t>& from, const std::vector<int64_t>& ids) {
                       if (!from.empty()) cache.reorder(from);
                       return decode_step(model, cache, ids);  // (rows, 1, V)
                     });
}

}  // namespace qkv::nn
