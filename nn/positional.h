// Position information added to token embeddings x (B, T, D):
//  - SinusoidalPositionalEncoding: the paper's fixed table,
//      PE(pos, 2i) = sin(pos / 10000^(2i/D)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/D));
//  - LearnedPositionalEmbedding: a trained (max_positions, D) table (GPT-style).
// Both add rows [0, T) of a table to every sequence through nn::add_positions.
#pragma once
#include "nn/module.h"

namespace qkv::nn {

// x (..., T, D) + table[:T] (rows 0..T-1 of table (L, D), L >= T), broadcast over
// the leading dims. Gradients: dx = dy; dtable[t] = sum over the leading dims of
// dy[..., t, :] for t < T, and 0 for rows t >= T.
Var add_positions(const Var& x, const Var& table);

class SinusoidalPositionalEncoding : public Module {
 public:
  // The table is a cache: at most kEagerRows of its max_positions rows are
  // computed here, the rest when a sequence first needs them.
  explicit SinusoidalPositionalEncoding(int64_t D, int64_t max_positions = 512);
  static constexpr int64_t kEagerRows = 65536;
  // x (B, T, D) -> x + PE[:T]. A T beyond the table grows it (the table is a cache
  // of a fixed function, hence mutable behind a const forward).
  Var forward(const Var& x) const;
  Var operator()(const Var& x) const { return forward(x); }
  // PE[:T] as a (T, D) tensor (grows the table when needed).
  Tensor table(int64_t T) const;
  int64_t max_positions() const { return table_.size(0); }  // rows currently in the table

  int64_t D;

 private:
  void grow(int64_t rows) const;
  mutable Tensor table_;  // (max_positions, D), no gradient
};

class LearnedPositionalEmbedding : public Module {
 public:
  LearnedPositionalEmbedding(int64_t max_positions, int64_t D, Generator& g = default_generator());
  // x (B, T, D) -> x + weight[:T]; T > max_positions throws.
  Var forward(const Var& x) const;
  Var operator()(const Var& x) const { return forward(x); }

  int64_t max_positions, D;
  Parameter weight;  // (max_positions, D), N(0, 1) as torch.nn.Embedding
};

}  // namespace qkv::nn
