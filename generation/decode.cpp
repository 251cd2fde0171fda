#include "generation/decode.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "generation/finite_logits.h"

namespace qkv::nn {

namespace {

// Index of the largest of row[0, V) outside `suppress`; the first one on ties.
int64_t argmax(const real* row, int64_t V, const std::vector<int64_t>& suppress) {
  check_finite_logits(row, V, "greedy_decode");
  int64_t best = -1;
  for (int64_t v = 0; v < V; ++v) {
    if (std::find(suppress.begin(), suppress.end(), v) != suppress.end()) continue;
    if (best < 0 || row[v] > row[best]) best = v;
  }
  if (best < 0)
    throw Error("greedy_decode: every one of the " + std::to_string(V) + " ids is suppressed");
  return best;
}

// The reference path: the decoder reruns over the whole prefix (B, t) at every step.
std::vector<std::vector<int64_t>> greedy_uncached(Seq2SeqTransformer& model, const Tokens& src,
                                                  const DecodeOptions& opt) {
  const int64_t B = src.batch, V = model.cfg.tgt_vocab;
  Var memory = model.encode(src);  // (B,S,D), computed once
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  std::vector<bool> done(static_cast<size_t>(B), false);
  // prefix (B, t): <bos> then the tokens chosen so far (pad after a sequence ends)
  std::vector<int64_t> prefix(static_cast<size_t>(B), opt.bos);
  int64_t remaining = B;
  for (int64_t t = 1; t <= opt.max_new_tokens && remaining > 0; ++t) {
    Tokens tgt{prefix, B, t, {}};
    Tensor logits = model.decode(tgt, memory, src).data();  // (B, t, V)
    std::vector<int64_t> next(static_cast<size_t>(B), opt.pad);
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      const int64_t best =
          argmax(logits.data() + (b * t + (t - 1)) * V, V, opt.suppress);  // last position
      next[b] = best;
      if (best == opt.eos && !opt.ignore_eos) {
        done[b] = true;
        --remaining;
      } else {
        out[b].push_back(best);
      }
    }
    // Append the new column: (B, t) -> (B, t+1).
    std::vector<int64_t> grown(static_cast<size_t>(B * (t + 1)));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < t; ++i) grown[b * (t + 1) + i] = prefix[b * t + i];
      grown[b * (t + 1) + t] = next[b];
    }
    prefix.swap(grown);
  }
  return out;
}

// The cached path: one decoder step per token over the rows still running;
// rows that emit <eos> leave the cache (KVCache::reorder), so the batch shrinks.
std::vector<std::vector<int64_t>> greedy_cached(Seq2SeqTransformer& model, const Tokens& src,
                                                const DecodeOptions& opt) {
  const int64_t B = src.batch, V = model.cfg.tgt_vocab;
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  // Positions fed: <bos> and at most max_new_tokens - 1 generated tokens.
  KVCache cache = start_decoding(model, src, opt.max_new_tokens);
  std::vector<int64_t> source(static_cast<size_t>(B));  // row r decodes source[r]
  for (int64_t b = 0; b < B; ++b) source[b] = b;
  std::vector<int64_t> ids(static_cast<size_t>(B), opt.bos), keep, next;
  for (int64_t t = 1; t <= opt.max_new_tokens && !source.empty(); ++t) {
    Tensor logits = decode_step(model, cache, ids);  // (R, 1, V)
    keep.clear();
    next.clear();
    for (int64_t r = 0; r < static_cast<int64_t>(source.size()); ++r) {
      const int64_t best = argmax(logits.data() + r * V, V, opt.suppress);
      if (best == opt.eos && !opt.ignore_eos) continue;
      out[source[r]].push_back(best);
      keep.push_back(r);
      next.push_back(best);
    }
    if (t == opt.max_new_tokens) break;
    if (keep.size() != source.size()) {
      cache.reorder(keep);
      for (size_t i = 0; i < keep.size(); ++i) source[i] = source[keep[i]];
      source.resize(keep.size());
    }
    ids.swap(next);
  }
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> greedy_decode(Seq2SeqTransformer& model, const Tokens& src,
                                                const DecodeOptions& opt) {
  src.check("greedy_decode");
  if (opt.max_new_tokens < 1)
    throw Error("greedy_decode: max_new_tokens must be >= 1, got " +
                std::to_string(opt.max_new_tokens));
  const int64_t V = model.cfg.tgt_vocab;
  for (int64_t id : {opt.bos, opt.eos, opt.pad})
    if (id < 0 || id >= V)
      throw Error("greedy_decode: special token id " + std::to_string(id) +
                  " outside the target vocabulary [0, " + std::to_string(V) + ")");
  NoGradGuard no_grad;
  return opt.use_cache ? greedy_cached(model, src, opt) : greedy_uncached(model, src, opt);
}

}  // namespace qkv::nn
