// Rotary position embedding (Su et al., RoFormer, 2021), as Llama uses it:
// instead of adding a position vector to the input, rotate each head's query
// and key by an angle proportional to the position. Pair i of a head's d_k
// numbers, (x_2i, x_2i+1), at position t turns by t * theta_i,
// theta_i = base^(-2i / d_k) (base 10000):
//   y_2i   = x_2i cos(t theta_i) - x_2i+1 sin(t theta_i)
//   y_2i+1 = x_2i sin(t theta_i) + x_2i+1 cos(t theta_i)
// The score of a query at t and a key at s then depends on t - s only. The
// pairs are adjacent numbers, as in the paper and Meta's Llama (Hugging
// Face's Llama pairs i with i + d_k/2 instead: the same maths on permuted
// weights). Backward is the inverse rotation. The derivation is in
// nn/rope.cpp and docs/rope-backward.md.
#pragma once
#include <memory>
#include <vector>

#include "nn/module.h"

namespace qkv::nn {

// cos(t theta_i) and sin(t theta_i) for t in [pos0, pos0 + T), i in
// [0, d_k / 2): (T, d_k / 2) each, computed in double.
struct RopeTable {
  int64_t T = 0, half = 0, pos0 = 0;  // half = d_k / 2
  std::vector<real> cos, sin;
};
RopeTable rope_table(int64_t T, int64_t d_k, real base = 10000, int64_t pos0 = 0);
// The same table, built once per (T, d_k, base, pos0) and shared: the fused
// attention's forward asks for it at every step, and a steady-state training
// step allocates nothing (tests/test_heap.cpp). The last 16 tables asked for
// are kept; thread-safe.
std::shared_ptr<const RopeTable> shared_rope_table(int64_t T, int64_t d_k, real base, int64_t pos0);

// ---- the kernel: in place over rows of heads ---------------------------------

// x holds `rows` rows, row r at x + r * ld, each H heads of d_k numbers side
// by side ([h*d_k, (h+1)*d_k)), as attention's Q and K are stored; row r is at
// position table.pos0 + r % table.T. Rotates every head of every row by its
// position's angles; inverse = true rotates back (the backward).
void rope_rotate(real* x, int64_t rows, int64_t H, int64_t d_k, int64_t ld, const RopeTable& table,
                 bool inverse);

// ---- the autograd op -----------------------------------------------------------

// x (B, T, H*d_k) -> (B, T, H*d_k), each head rotated by its position
// pos0 + t. d_k must be even. The graph shows it as "rope".
Var rope(const Var& x, int64_t heads, real base = 10000, int64_t pos0 = 0);

}  // namespace qkv::nn
