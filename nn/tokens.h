// nn::Tokens: what every model reads. A batch of token sequences as ids
// (B, L) row-major (L is T for a target, S for a source), with the length of
// each sequence; positions at or past lengths[b] hold padding. The models turn
// the lengths into attention masks (AttentionMask::padding / causal_padding in
// nn/attention.h), so padding is never attended to.
#pragma once
#include <cstdint>
#include <vector>

namespace qkv::nn {

struct Tokens {
  std::vector<int64_t> ids;                   // (B, L) row-major
  int64_t batch = 0, len = 0;                 // B, L
  std::vector<int64_t> lengths;               // (B); empty means every sequence is full
  std::vector<int64_t> full_lengths() const;  // lengths, or all `len` when empty
  void check(const char* op) const;           // sizes agree; lengths within [0, len]
};

}  // namespace qkv::nn
