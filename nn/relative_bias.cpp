// T5's relative position buckets and the bias laid out by diagonal
// (nn/relative_bias.h); the kernels that add it and its gradient are the
// attention op's (nn/attention.cpp, nn/attention_blocks.cpp).
#include "nn/relative_bias.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace qkv::nn {

int64_t relative_position_bucket(int64_t rel, bool bidirectional, int64_t buckets,
                                 int64_t max_distance) {
  int64_t nb = buckets, base = 0, n;
  if (bidirectional) {
    nb = buckets / 2;          // per direction
    base = rel > 0 ? nb : 0;   // a later key: the upper half
    n = rel < 0 ? -rel : rel;  // |rel|
  } else {
    n = rel < 0 ? -rel : 0;  // max(-rel, 0): an earlier key's distance
  }
  const int64_t exact = nb / 2;  // distances 0 .. exact-1 have a bucket each
  if (n < exact) return base + n;
  // exact + floor(log(n / exact) / log(max_distance / exact) * (nb - exact)), at most nb - 1
  const double large =
      static_cast<double>(exact) + std::log(static_cast<double>(n) / exact) /
                                       std::log(static_cast<double>(max_distance) / exact) *
                                       static_cast<double>(nb - exact);
  return base + std::min<int64_t>(static_cast<int64_t>(large), nb - 1);
}

void check_relative_bias(const char* op, int64_t buckets, int64_t max_distance,
                         bool bidirectional) {
  const std::string o(op);
  if (bidirectional && (buckets < 4 || buckets % 2 != 0))
    throw Error(o + ": " + std::to_string(buckets) +
                " relative buckets; bidirectional needs an even count >= 4 (half per direction)");
  if (!bidirectional && buckets < 2)
    throw Error(o + ": " + std::to_string(buckets) + " relative buckets; causal needs >= 2");
  const int64_t exact = (bidirectional ? buckets / 2 : buckets) / 2;
  if (max_distance <= exact)
    throw Error(o + ": relative max distance " + std::to_string(max_distance) +
                " must exceed the " + std::to_string(exact) + " exact buckets of " +
                std::to_string(buckets) + (bidirectional ? " bidirectional" : " causal") +
                " buckets");
}

void relative_bias_diagonals(const real* table, int64_t H, const RelativeLayout& l, real* out) {
  const int64_t n = l.diagonals();
  for (int64_t d = 0; d < n; ++d) {
    const int64_t k = l.bucket_of_diagonal(d);
    for (int64_t h = 0; h < H; ++h) out[h * n + d] = table[h * l.buckets + k];
  }
}

void add_diagonal_bias(real* Z, int64_t ldz, int64_t n, int64_t m, const real* d0) {
  for (int64_t r = 0; r < n; ++r) {
    real* __restrict z = Z + r * ldz;   // (m)
    const real* __restrict b = d0 - r;  // b[c] = bias of diagonal (c - r)
#pragma omp simd
    for (int64_t c = 0; c < m; ++c) z[c] += b[c];
  }
}

void sum_diagonals(const real* dZ, int64_t ldz, int64_t n, int64_t m, real* g0) {
  for (int64_t r = 0; r < n; ++r) {
    const real* __restrict z = dZ + r * ldz;  // (m)
    real* __restrict g = g0 - r;              // g[c]: diagonal (c - r)
#pragma omp simd
    for (int64_t c = 0; c < m; ++c) g[c] += z[c];
  }
}

void diagonals_to_table(const real* ddiag, int64_t rows, int64_t H, const RelativeLayout& l,
                        real* dtable) {
  const int64_t n = l.diagonals();
  std::fill(dtable, dtable + H * l.buckets, real(0));
  for (int64_t d = 0; d < n; ++d) {
    const int64_t k = l.bucket_of_diagonal(d);
    for (int64_t h = 0; h < H; ++h) {
      real s = 0;
      for (int64_t r = 0; r < rows; ++r) s += ddiag[(r * H + h) * n + d];  // sum over sequences
      dtable[h * l.buckets + k] += s;
    }
  }
}

}  // namespace qkv::nn
