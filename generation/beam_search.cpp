#include "generation/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "generation/finite_logits.h"
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
  if (o.max_new_tokens < 1)
    throw Error("beam_search: max_new_tokens must be >= 1, got " +
                std::to_string(o.max_new_tokens));
  if (V < 1) throw Error("beam_search: vocabulary size must be >= 1, got " + std::to_string(V));
  for (int64_t id : {o.bos, o.eos, o.pad})
    if (id < 0 || id >= V)
      throw Error("beam_search: special token id " + std::to_string(id) +
                  " outside the vocabulary [0, " + std::to_string(V) + ")");
}

constexpr double kDead = -std::numeric_limits<double>::infinity();

// One source's search state. Live hypothesis j has logp[j] (kDead: an empty
// slot) and tokens tok[j * L, j * L + t), L = max_new_tokens.
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

// The search over all sources at once, one step at a time. Row block a of
// the rows fed to the step (k rows) decodes source running_[a]; `from` says
// which row of the previous step each row continues (the cache reorder) and
// `ids` which token it feeds.
class Search {
 public:
  Search(int64_t sources, int64_t V, const BeamOptions& opt)
      : opt_(opt),
        V_(V),
        k_(opt.beam),
        L_(opt.max_new_tokens),
        state_(static_cast<size_t>(sources)),
        running_(static_cast<size_t>(sources)),
        row_(static_cast<size_t>(V)) {
    ids.assign(static_cast<size_t>(sources * k_), opt.bos);
    for (SourceState& s : state_) {
      // Only hypothesis 0 starts live: k copies of <bos> would give k equal beams.
      s.logp.assign(static_cast<size_t>(k_), kDead);
      s.logp[0] = 0;
      s.next_logp.resize(static_cast<size_t>(k_));
      s.tok.assign(static_cast<size_t>(k_ * L_), opt.pad);
      s.next_tok.assign(static_cast<size_t>(k_ * L_), opt.pad);
    }
    for (int64_t s = 0; s < sources; ++s) running_[s] = s;
    cand_.reserve(static_cast<size_t>(k_ * V));
  }

  bool running() const { return !running_.empty(); }
  int64_t rows() const { return static_cast<int64_t>(running_.size()) * k_; }

  // Step t (1-based; the token at position t - 1 is chosen): logits (rows(), V)
  // for the rows fed -> the rows to feed next, in `from` and `ids`.
  void advance(const Tensor& logits, int64_t t) {
    next_running_.clear();
    next_from_.clear();
    next_ids_.clear();
    for (int64_t a = 0; a < static_cast<int64_t>(running_.size()); ++a) {
      SourceState& s = state_[running_[a]];
      const int64_t top = best_candidates(s, logits.data() + a * k_ * V_);
      const int64_t live = extend(s, a, top, t);
      if (done(s, live, t)) {
        next_from_.resize(next_from_.size() - live);
        next_ids_.resize(next_ids_.size() - live);
        continue;
      }
      // Pad the block to k rows with dead slots (their logits are ignored).
      for (int64_t j = live; j < k_; ++j) {
        next_from_.push_back(a * k_);
        next_ids_.push_back(opt_.pad);
      }
      next_running_.push_back(running_[a]);
    }
    running_.swap(next_running_);
    from.swap(next_from_);
    ids.swap(next_ids_);
  }

  // The best finished hypothesis of each source (empty if none finished).
  std::vector<BeamHypothesis> best() const {
    std::vector<BeamHypothesis> out(state_.size());
    for (size_t s = 0; s < state_.size(); ++s)
      if (!state_[s].finished.empty()) out[s] = state_[s].finished.front();
    return out;
  }

  std::vector<int64_t> from, ids;  // the rows to feed the next step

 private:
  // Every extension (summed log-prob, index j * V + v) of s's live hypotheses
  // into cand_, the best 2k of them sorted first; returns how many that is.
  // block: s's k rows of logits (k, V).
  int64_t best_candidates(const SourceState& s, const real* block) {
    cand_.clear();
    for (int64_t j = 0; j < k_; ++j) {
      if (s.logp[j] == kDead) continue;
      const real* lg = block + j * V_;
      check_finite_logits(lg, V_, "beam_search");
      std::copy(lg, lg + V_, row_.begin());
      log_softmax_rows(row_.data(), 1, V_);
      for (int64_t v = 0; v < V_; ++v)
        if (std::find(opt_.suppress.begin(), opt_.suppress.end(), v) == opt_.suppress.end())
          cand_.emplace_back(s.logp[j] + row_[v], j * V_ + v);
    }
    const int64_t top = std::min<int64_t>(2 * k_, static_cast<int64_t>(cand_.size()));
    auto better = [](const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    std::partial_sort(cand_.begin(), cand_.begin() + top, cand_.end(), better);
    return top;
  }

  // The best k extensions not ending in <eos> stay live (queued as rows of
  // block a); an <eos> among the best k candidates finishes its hypothesis
  // (len t, counting the <eos>). Returns the number live.
  int64_t extend(SourceState& s, int64_t a, int64_t top, int64_t t) {
    int64_t live = 0;
    for (int64_t c = 0; c < top && live < k_; ++c) {
      const int64_t j = cand_[c].second / V_, v = cand_[c].second % V_;
      const double lp = cand_[c].first;
      if (lp == kDead) break;
      if (v == opt_.eos && !opt_.ignore_eos) {
        if (c < k_)
          s.finish(&s.tok[j * L_], t - 1, lp, lp / length_penalty(t, opt_.alpha), true, k_);
        continue;
      }
      std::copy(&s.tok[j * L_], &s.tok[j * L_] + (t - 1), &s.next_tok[live * L_]);
      s.next_tok[live * L_ + t - 1] = v;
      s.next_logp[live] = lp;
      next_from_.push_back(a * k_ + j);
      next_ids_.push_back(v);
      ++live;
    }
    for (int64_t j = live; j < k_; ++j) s.next_logp[j] = kDead;
    s.logp.swap(s.next_logp);
    s.tok.swap(s.next_tok);
    return live;
  }

  // Whether source s stops after step t with `live` live hypotheses.
  bool done(SourceState& s, int64_t live, int64_t t) const {
    if (t == L_) {
      // The cap: the live hypotheses finish as they are (len t, no <eos>).
      for (int64_t j = 0; j < live; ++j)
        s.finish(&s.tok[j * L_], t, s.logp[j], s.logp[j] / length_penalty(t, opt_.alpha), false,
                 k_);
      return true;
    }
    if (live == 0) return true;
    double best_live = kDead;
    for (int64_t j = 0; j < live; ++j) best_live = std::max(best_live, s.logp[j]);
    // No live hypothesis beats the worst kept finished one.
    return static_cast<int64_t>(s.finished.size()) == k_ &&
           best_live / length_penalty(t, opt_.alpha) <= s.finished.back().score;
  }

  const BeamOptions& opt_;
  int64_t V_, k_, L_;  // vocabulary, beam, max_new_tokens
  std::vector<SourceState> state_;
  std::vector<int64_t> running_;  // the sources still searching
  std::vector<int64_t> next_running_, next_from_, next_ids_;
  std::vector<real> row_;                         // (V) one row's log-probabilities
  std::vector<std::pair<double, int64_t>> cand_;  // (k V) one source's candidates
};

}  // namespace

std::vector<BeamHypothesis> beam_search(int64_t sources, int64_t V, const BeamOptions& opt,
                                        const BeamStep& step) {
  check_options(opt, V);
  if (sources < 0)
    throw Error("beam_search: negative number of sources " + std::to_string(sources));
  Search search(sources, V, opt);
  for (int64_t t = 1; t <= opt.max_new_tokens && search.running(); ++t) {
    const int64_t R = search.rows();
    Tensor logits = step(search.from, search.ids);  // (R, V)
    if (logits.numel() != R * V)
      throw Error("beam_search: the step returned " + to_string(logits.shape()) + " logits for " +
                  std::to_string(R) + " rows of vocabulary " + std::to_string(V));
    search.advance(logits, t);
  }
  return search.best();
}

namespace {

// The reference scorer: every row's whole prefix through the decoder at every
// step. Row r follows old row from[r], as the cache's reorder does: its source
// and its prefix (<bos> and the tokens fed since).
class RecomputeStep {
 public:
  RecomputeStep(Seq2SeqTransformer& model, const Tokens& src, int64_t rows_per_source)
      : model_(model), src_(src), memory_(model.encode(src).data()) {
    for (int64_t r = 0; r < src.batch * rows_per_source; ++r) {
      source_.push_back(r / rows_per_source);
      prefix_.emplace_back();
    }
  }
  Tensor operator()(const std::vector<int64_t>& from, const std::vector<int64_t>& ids) {
    const int64_t R = static_cast<int64_t>(ids.size()), S = src_.len, D = memory_.size(2);
    if (!from.empty()) {
      std::vector<int64_t> source(static_cast<size_t>(R));
      std::vector<std::vector<int64_t>> prefix(static_cast<size_t>(R));
      for (int64_t r = 0; r < R; ++r) {
        source[r] = source_[from[r]];
        prefix[r] = prefix_[from[r]];
      }
      source_.swap(source);
      prefix_.swap(prefix);
    }
    for (int64_t r = 0; r < R; ++r) prefix_[r].push_back(ids[r]);
    const int64_t T = static_cast<int64_t>(prefix_[0].size());
    // The rows' prefixes (R, T), their sources' ids and lengths (R, S), memory (R, S, D).
    Tokens tgt{{}, R, T, {}}, src{{}, R, S, {}};
    Tensor memory = Tensor::empty({R, S, D});
    const std::vector<int64_t> lengths = src_.full_lengths();
    for (int64_t r = 0; r < R; ++r) {
      const int64_t s = source_[r];
      tgt.ids.insert(tgt.ids.end(), prefix_[r].begin(), prefix_[r].end());
      src.ids.insert(src.ids.end(), src_.ids.begin() + s * S, src_.ids.begin() + (s + 1) * S);
      src.lengths.push_back(lengths[s]);
      std::copy(memory_.data() + s * S * D, memory_.data() + (s + 1) * S * D,
                memory.data() + r * S * D);
    }
    Tensor logits = model_.decode(tgt, Var(memory), src).data();  // (R, T, V)
    const int64_t V = logits.size(2);
    Tensor last = Tensor::empty({R, V});  // position T - 1 of every row
    for (int64_t r = 0; r < R; ++r)
      std::copy(logits.data() + (r * T + T - 1) * V, logits.data() + (r * T + T) * V,
                last.data() + r * V);
    return last;
  }

 private:
  Seq2SeqTransformer& model_;
  const Tokens& src_;
  Tensor memory_;  // (B, S, D), encoded once
  std::vector<int64_t> source_;
  std::vector<std::vector<int64_t>> prefix_;
};

}  // namespace

std::vector<BeamHypothesis> beam_search(Seq2SeqTransformer& model, const Tokens& src,
                                        const BeamOptions& opt) {
  src.check("beam_search");
  check_options(opt, model.cfg.tgt_vocab);
  NoGradGuard no_grad;
  if (!opt.use_cache) {
    RecomputeStep step(model, src, opt.beam);
    return beam_search(src.batch, model.cfg.tgt_vocab, opt, std::ref(step));
  }
  // k rows per source; positions fed: <bos> and at most max_new_tokens - 1 tokens.
  KVCache cache = start_decoding(model, src, opt.max_new_tokens, opt.beam);
  return beam_search(src.batch, model.cfg.tgt_vocab, opt,
                     [&](const std::vector<int64_t>& from, const std::vector<int64_t>& ids) {
                       if (!from.empty()) cache.reorder(from);
                       return decode_step(model, cache, ids);  // (rows, 1, V)
                     });
}

}  // namespace qkv::nn
