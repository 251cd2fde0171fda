// Token sequences and the batches the models read. The special token ids are
// the same in every vocabulary here (data/vocab.h) and every checkpoint
// (its "special_tokens"): 0 <pad>, 1 <s> (begin), 2 </s> (end), and 3 <unk>
// when a vocabulary has one.
//
// The encoder-decoder reads (source, target) pairs; the decoder-only model
// reads a pair as one sequence "source <s> target </s>" (collate_prompted).
#pragma once
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
nn::Tokens right_padded(const std::vector<Seq>& seqs);

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
Batch collate_pairs(const std::vector<Pair>& pairs);

// Decoder-only batch: ids (B, T) and next-token targets (B*T), pad = ignored.
struct LMBatch {
  nn::Tokens ids;
  std::vector<int64_t> targets;
  int64_t target_tokens = 0;
};

// A pair as one sequence "src <s> tgt </s>": the model reads all but the last
// token and is scored only on predicting tgt and </s>.
LMBatch collate_prompted(const std::vector<Pair>& pairs);

}  // namespace qkv::data
