// Batches as the models read them (data/batch.h): right padding, the
// encoder-decoder's teacher-forcing layout and the decoder-only model's
// prompted sequence.
#include "data/batch.h"

#include <algorithm>

namespace qkv::data {

// Sequences as one right-padded batch (B, S) with their lengths.
nn::Tokens right_padded(const std::vector<Seq>& seqs) {
  const int64_t B = static_cast<int64_t>(seqs.size());
  nn::Tokens t{std::vector<int64_t>(), B, 0, std::vector<int64_t>(static_cast<size_t>(B))};
  for (const Seq& s : seqs) t.len = std::max<int64_t>(t.len, static_cast<int64_t>(s.size()));
  t.ids.assign(static_cast<size_t>(B * t.len), kPad);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(seqs[b].begin(), seqs[b].end(), t.ids.begin() + b * t.len);
    t.lengths[b] = static_cast<int64_t>(seqs[b].size());
  }
  return t;
}

// Encoder-decoder batch from pairs (layout in Batch, data/batch.h).
Batch collate_pairs(const std::vector<Pair>& pairs) {
  Batch b;
  const int64_t B = static_cast<int64_t>(pairs.size());
  int64_t S = 0, T = 0;
  for (const Pair& p : pairs) {
    S = std::max<int64_t>(S, static_cast<int64_t>(p.src.size()));
    T = std::max<int64_t>(T, static_cast<int64_t>(p.tgt.size()) + 1);
  }
  b.src = {std::vector<int64_t>(B * S, kPad), B, S, std::vector<int64_t>(B)};
  b.tgt_in = {std::vector<int64_t>(B * T, kPad), B, T, std::vector<int64_t>(B)};
  b.tgt_out.assign(B * T, kPad);
  for (int64_t i = 0; i < B; ++i) {
    const Seq &s = pairs[i].src, &y = pairs[i].tgt;
    const int64_t L = static_cast<int64_t>(y.size());
    std::copy(s.begin(), s.end(), b.src.ids.begin() + i * S);
    b.src.lengths[i] = static_cast<int64_t>(s.size());
    b.tgt_in.ids[i * T] = kBos;  // <s> y1 .. yL
    std::copy(y.begin(), y.end(), b.tgt_in.ids.begin() + i * T + 1);
    std::copy(y.begin(), y.end(), b.tgt_out.begin() + i * T);  // y1 .. yL </s>
    b.tgt_out[i * T + L] = kEos;
    b.tgt_in.lengths[i] = L + 1;
    b.target_tokens += L + 1;
  }
  return b;
}

// A pair as one sequence "src <s> tgt </s>", scored on tgt and </s>.
LMBatch collate_prompted(const std::vector<Pair>& pairs) {
  LMBatch b;
  const int64_t B = static_cast<int64_t>(pairs.size());
  int64_t T = 0;
  for (const Pair& p : pairs)
    T = std::max<int64_t>(T, static_cast<int64_t>(p.src.size() + p.tgt.size()) + 1);
  b.ids = {std::vector<int64_t>(B * T, kPad), B, T, std::vector<int64_t>(B)};
  b.targets.assign(B * T, kPad);
  for (int64_t i = 0; i < B; ++i) {
    const Seq &s = pairs[i].src, &y = pairs[i].tgt;
    const int64_t Ls = static_cast<int64_t>(s.size()), Ly = static_cast<int64_t>(y.size());
    int64_t* row = b.ids.ids.data() + i * T;
    std::copy(s.begin(), s.end(), row);
    row[Ls] = kBos;
    std::copy(y.begin(), y.end(), row + Ls + 1);
    b.ids.lengths[i] = Ls + 1 + Ly;
    // position Ls (reading <s>) predicts y1, ..., position Ls+Ly predicts </s>
    for (int64_t k = 0; k < Ly; ++k) b.targets[i * T + Ls + k] = y[k];
    b.targets[i * T + Ls + Ly] = kEos;
    b.target_tokens += Ly + 1;
  }
  return b;
}

}  // namespace qkv::data
