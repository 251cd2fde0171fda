// T5's relative position bias (Raffel et al. 2020, section 2.1): a learned
// scalar per head per bucket of relative distance, added to every head's
// attention scores after the scale and before the mask and the softmax,
//   Z[b,h,i,j] = scale Q_h K_h^T [i,j] + table[h, bucket(j - i)] + M[i,j].
// One table (H, buckets) per stack, shared by all its layers. The buckets:
//   rel = key position - query position;
//   bidirectional (an encoder): half the buckets for rel > 0, half for
//     rel <= 0, n = |rel|; causal (a decoder, a GPT): all buckets for
//     n = max(-rel, 0) (a later key is hidden anyway);
//   of a direction's nb buckets, n < nb/2 has its own bucket n, and
//     n >= nb/2 falls in nb/2 + floor(log(n / (nb/2)) / log(max_distance /
//     (nb/2)) * (nb - nb/2)), clamped to nb - 1: logarithmic up to
//     max_distance, every longer distance in the last bucket.
// This is Hugging Face's T5Attention._relative_position_bucket, in double.
//
// The kernels (nn/attention.cpp, nn/attention_blocks.cpp) never look a bucket
// up per score: the bias depends on j - i only, so it is laid out by
// diagonal, bias_diag[h, j - i + T - 1] (T + S - 1 numbers per head), and a
// row of scores adds a contiguous slice of it. Backward sums dZ along each
// diagonal, per (sequence, head), then adds each diagonal's sum into its
// bucket: dtable[h, bucket(d)] += sum_b ddiag[b, h, d] (docs/relative-bias-backward.md).
#pragma once
#include <cstdint>

#include "core/real.h"

namespace qkv::nn {

// The bucket of relative position rel = key - query (see above). Needs the
// settings check_relative_bias accepts.
int64_t relative_position_bucket(int64_t rel, bool bidirectional, int64_t buckets,
                                 int64_t max_distance);

// Buckets and maximum distance a table can use: per direction at least 2
// buckets (bidirectional: an even count >= 4; causal >= 2), and a maximum
// distance above the exact buckets (nb/2 of a direction's nb). Throws one
// line starting with `op`.
void check_relative_bias(const char* op, int64_t buckets, int64_t max_distance, bool bidirectional);

// Where the queries and keys sit: query i at position pos0 + i (i < T), key
// j at position j (j < S); the bias of score (i, j) is that of rel =
// j - i - pos0. pos0 is 0 for a whole sequence, t0 for the KV cache's new
// positions [t0, t0 + T) over keys [0, S).
struct RelativeLayout {
  int64_t T, S, pos0;
  bool bidirectional;
  int64_t buckets, max_distance;
  int64_t diagonals() const { return T + S - 1; }
  // The bucket of diagonal d = j - i + T - 1.
  int64_t bucket_of_diagonal(int64_t d) const {
    return relative_position_bucket(d - (T - 1) - pos0, bidirectional, buckets, max_distance);
  }
};

// out (H, T + S - 1): out[h, d] = table[h, bucket_of_diagonal(d)], table (H, buckets).
void relative_bias_diagonals(const real* table, int64_t H, const RelativeLayout& l, real* out);

// Z (n, m), row stride ldz, += the bias: Z[r, c] += d0[c - r], where d0
// points at the diagonal of element (0, 0) (d0[-r] must exist for r < n).
void add_diagonal_bias(real* Z, int64_t ldz, int64_t n, int64_t m, const real* d0);
// Its backward: g0[c - r] += dZ[r, c] for the (n, m) block dZ, row stride ldz.
void sum_diagonals(const real* dZ, int64_t ldz, int64_t n, int64_t m, real* g0);

// dtable (H, buckets) = the diagonal sums ddiag (rows, H, T + S - 1) summed
// over rows (the sequences) and added into their buckets (overwrites dtable).
void diagonals_to_table(const real* ddiag, int64_t rows, int64_t H, const RelativeLayout& l,
                        real* dtable);

}  // namespace qkv::nn
