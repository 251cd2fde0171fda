// Token sequences and the batches the models read. The special token ids are
// the same in every vocabulary here (data/vocab.h) and every checkpoint
// (its "special_tokens"): 0 <pad>, 1 <s> (begin), 2 </s> (end), and 3 <unk>
// when a vocabulary has one.
//
// The encoder-decoder reads (source, target) pairs; the decoder-only model
// reads a pair as one sequence "source <s> target </s>" (collate_prompted).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "nn/tokens.h"

namespace qkv::data {

inline constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kUnk = 3;

using Seq = std::vector<int64_t>;

struct Pair {
  Seq src, tgt;
};

// Sequences as one right-padded batch (B, S) with their lengths.
inline nn::Tokens right_padded(const std::vector<Seq>& seqs) {
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

// A batch ready for teacher forcing:
//   src     (B, S)  symbols, padded
//   tgt_in  (B, T)  <bos> y1 .. yL, padded      (T = max L + 1)
//   tgt_out (B*T)   y1 .. yL <eos>, padded       (pad ignored by the loss)
struct Batch {
  nn::Tokens src, tgt_in;
  std::vector<int64_t> tgt_out;
  int64_t target_tokens = 0;  // non-pad entries of tgt_out
};

// Encoder-decoder batch from pairs (layout in Batch above).
inline Batch collate_pairs(const std::vector<Pair>& pairs) {
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

// Decoder-only batch: ids (B, T) and next-token targets (B*T), pad = ignored.
struct LMBatch {
  nn::Tokens ids;
  std::vector<int64_t> targets;
  int64_t target_tokens = 0;
};

// A pair as one sequence "src <s> tgt </s>": the model reads all but the last
// token and is scored only on predicting tgt and </s>.
inline LMBatch collate_prompted(const std::vector<Pair>& pairs) {
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
