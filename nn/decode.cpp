#include "nn/decode.h"

#include <string>

#include "core/error.h"

namespace qkv::nn {

std::vector<std::vector<int64_t>> greedy_decode(Seq2SeqTransformer& model, const Tokens& src,
                                                const DecodeOptions& opt) {
  src.check("greedy_decode");
  if (opt.max_len < 1) throw Error("greedy_decode: max_len must be >= 1, got " + std::to_string(opt.max_len));
  NoGradGuard no_grad;
  const int64_t B = src.batch, V = model.cfg.tgt_vocab;
  Var memory = model.encode(src);  // (B,S,D), computed once
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  std::vector<bool> done(static_cast<size_t>(B), false);
  // prefix (B, t): <bos> then the tokens chosen so far (pad after a sequence ends)
  std::vector<int64_t> prefix(static_cast<size_t>(B), opt.bos);
  int64_t remaining = B;
  for (int64_t t = 1; t <= opt.max_len && remaining > 0; ++t) {
    Tokens tgt{prefix, B, t, {}};
    Tensor logits = model.decode(tgt, memory, src).data();  // (B, t, V)
    std::vector<int64_t> next(static_cast<size_t>(B), opt.pad);
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      const real* row = logits.data() + (b * t + (t - 1)) * V;  // last position
      int64_t best = 0;
      for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[best]) best = v;
      next[b] = best;
      if (best == opt.eos) {
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

}  // namespace qkv::nn
