#include "core/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/fast_math.h"
#include "core/parallel.h"

namespace qkv {
namespace {

// Views `a` as (outer, n, inner) around `axis`.
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
  Shape out_shape;
};

AxisView axis_view(const Tensor& a, int axis, bool keepdim, const char* op) {
  check_defined(a, op);
  if (a.dim() == 0) throw Error(std::string(op) + ": cannot reduce a scalar over an axis");
  const int ax = normalize_axis(axis, a.dim(), op, a.shape());
  AxisView v;
  for (int d = 0; d < ax; ++d) v.outer *= a.shape()[d];
  v.n = a.shape()[ax];
  for (int d = ax + 1; d < a.dim(); ++d) v.inner *= a.shape()[d];
  v.out_shape = a.shape();
  if (keepdim)
    v.out_shape[ax] = 1;
  else
    v.out_shape.erase(v.out_shape.begin() + ax);
  return v;
}

}  // namespace

Tensor sum(const Tensor& a, int axis, bool keepdim) {
  const AxisView v = axis_view(a, axis, keepdim, "sum");
  Tensor out = Tensor::empty(v.out_shape);
  const real* __restrict x = a.data();
  real* __restrict y = out.data();
  if (v.inner == 1) {
    parallel_for(
        v.outer,
        [&](int64_t o0, int64_t o1) {
          for (int64_t o = o0; o < o1; ++o) {
            const real* row = x + o * v.n;
            // In double: a float accumulator over a million numbers drifts by
            // ~1e-5 relative, more or less depending on how the compiler
            // splits the loop into vector lanes; double makes the result the
            // row's sum rounded once, in every build.
            double s = 0;
#pragma omp simd reduction(+ : s)
            for (int64_t k = 0; k < v.n; ++k) s += row[k];
            y[o] = static_cast<real>(s);
          }
        },
        grain_for(v.n));
  } else {
    parallel_for(
        v.outer,
        [&](int64_t o0, int64_t o1) {
          for (int64_t o = o0; o < o1; ++o) {
            real* yo = y + o * v.inner;
            for (int64_t i = 0; i < v.inner; ++i) yo[i] = 0;
            for (int64_t k = 0; k < v.n; ++k) {
              const real* xk = x + (o * v.n + k) * v.inner;
              for (int64_t i = 0; i < v.inner; ++i) yo[i] += xk[i];
            }
          }
        },
        grain_for(v.n * v.inner));
  }
  return out;
}

Tensor mean(const Tensor& a, int axis, bool keepdim) {
  const AxisView v = axis_view(a, axis, keepdim, "mean");
  if (v.n == 0) throw Error("mean: axis of size 0 in shape " + to_string(a.shape()));
  Tensor s = sum(a, axis, keepdim);
  return s.mul_(real(1) / static_cast<real>(v.n));
}

Tensor max_with_index(const Tensor& a, int axis, bool keepdim, std::vector<int64_t>& index) {
  const AxisView v = axis_view(a, axis, keepdim, "max");
  if (v.n == 0) throw Error("max: axis of size 0 in shape " + to_string(a.shape()));
  Tensor out = Tensor::empty(v.out_shape);
  index.assign(static_cast<size_t>(out.numel()), 0);
  const real* x = a.data();
  real* y = out.data();
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < v.inner; ++i) {
      int64_t best = o * v.n * v.inner + i;
      for (int64_t k = 1; k < v.n; ++k) {
        const int64_t at = (o * v.n + k) * v.inner + i;
        if (x[at] > x[best] || (std::isnan(x[at]) && !std::isnan(x[best]))) best = at;
      }
      y[o * v.inner + i] = x[best];
      index[static_cast<size_t>(o * v.inner + i)] = best;
    }
  return out;
}

Tensor max(const Tensor& a, int axis, bool keepdim) {
  std::vector<int64_t> idx;
  return max_with_index(a, axis, keepdim, idx);
}

Tensor sum(const Tensor& a) {
  check_defined(a, "sum");
  return sum(a.reshape({a.numel()}), 0, false);
}
Tensor mean(const Tensor& a) {
  check_defined(a, "mean");
  if (a.numel() == 0) throw Error("mean: empty tensor of shape " + to_string(a.shape()));
  return sum(a).mul_(real(1) / static_cast<real>(a.numel()));
}
Tensor max(const Tensor& a) {
  check_defined(a, "max");
  if (a.numel() == 0) throw Error("max: empty tensor of shape " + to_string(a.shape()));
  return max(a.reshape({a.numel()}), 0, false);
}

// ---- softmax family --------------------------------------------------------

namespace {

// The largest entry of a row; -inf for an empty or fully masked row.
inline real row_max(const real* __restrict row, int64_t n) {
  real m = -std::numeric_limits<real>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t k = 0; k < n; ++k) m = row[k] > m ? row[k] : m;
  return m;
}

// Rows [0, rows) of a block, x -> p (p may be x: in place):
//   p = exp(x - max) / sum(exp(x - max)), and when asked, per row,
//   lse = log(sum(exp(x))) = max + log(sum(exp(x - max)))  and  sum_x = sum(x)
// (what a loss over log-probabilities needs; see nn/cross_entropy.cpp).
// Done in three passes over the block rather than row by row, so that the
// costly part, exp, runs as one vector loop over rows * n contiguous numbers:
// with short rows (attention over 12 keys) a per-row exp loop spends most of
// its time in the scalar remainder after the last full vector. The block is
// kept small (kSoftmaxBlock numbers) so the three passes stay in L1.
constexpr int64_t kSoftmaxBlock = 2048;
__attribute__((noinline)) void softmax_block(const real* x, real* __restrict p, int64_t rows,
                                             int64_t n, RowSums* sums) {
  // 1. p = x - max(x), keeping the max for lse. A fully masked row (every
  //    entry -inf) is copied as it is: -inf - -inf would be NaN, and
  //    exp(-inf) = 0 is what it needs. (No __restrict on x: it may be p.)
  for (int64_t r = 0; r < rows; ++r) {
    const real* xr = x + r * n;
    real* __restrict pr = p + r * n;
    const real m = row_max(xr, n);
    const real shift = m == -std::numeric_limits<real>::infinity() ? real(0) : m;
    if (sums) {
      double sx = 0;
#pragma omp simd reduction(+ : sx)
      for (int64_t k = 0; k < n; ++k) {
        sx += xr[k];
        pr[k] = xr[k] - shift;
      }
      sums[r].lse = m;  // completed in pass 3
      sums[r].sum_x = sx;
    } else {
#pragma omp simd
      for (int64_t k = 0; k < n; ++k) pr[k] = xr[k] - shift;
    }
  }
  // 2. exp over the whole block.
  const int64_t total = rows * n;
#pragma omp simd
  for (int64_t i = 0; i < total; ++i) p[i] = fast_exp(p[i]);
  // 3. row /= sum(row). The sum is at least 1 (the max entry gave exp(0))
  //    unless the row was fully masked, whose zeros are the defined result.
  for (int64_t r = 0; r < rows; ++r) {
    real* __restrict row = p + r * n;
    real s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t k = 0; k < n; ++k) s += row[k];
    if (sums) sums[r].lse += std::log(static_cast<double>(s));
    if (s == 0) continue;
    const real inv = real(1) / s;
#pragma omp simd
    for (int64_t k = 0; k < n; ++k) row[k] *= inv;
  }
}

// Rows in blocks of about kSoftmaxBlock numbers (at least one row each).
void softmax_rows_serial(const real* x, real* p, int64_t rows, int64_t n, RowSums* sums) {
  const int64_t per_block = std::max<int64_t>(1, kSoftmaxBlock / std::max<int64_t>(n, 1));
  for (int64_t r = 0; r < rows; r += per_block)
    softmax_block(x + r * n, p + r * n, std::min(per_block, rows - r), n,
                  sums ? sums + r : nullptr);
}

// row = row - logsumexp(row). x - logsumexp(x) = (x - m) - log(s): subtracting
// m first keeps large logits exact (m + log(s) would round to the spacing of
// m, 6e-5 at 1000).
__attribute__((noinline)) void log_softmax_row(real* __restrict row, int64_t n) {
  const real m = row_max(row, n);
  real s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t k = 0; k < n; ++k) s += fast_exp(row[k] - m);
  const real log_s = std::log(s);
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) row[k] = (row[k] - m) - log_s;
}

}  // namespace

void softmax_rows(const real* x, real* p, int64_t rows, int64_t n, RowSums* sums) {
  parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        softmax_rows_serial(x + r0 * n, p + r0 * n, r1 - r0, n, sums ? sums + r0 : nullptr);
      },
      grain_for(n));
}

void softmax_rows(real* x, int64_t rows, int64_t n) { softmax_rows(x, x, rows, n, nullptr); }

void log_softmax_rows(real* x, int64_t rows, int64_t n) {
  parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) log_softmax_row(x + r * n, n);
      },
      grain_for(n));
}

void broadcast_rows(real* __restrict y, int64_t rows, int64_t n, const real* __restrict b) {
  parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          real* __restrict yr = y + r * n;
#pragma omp simd
          for (int64_t k = 0; k < n; ++k) yr[k] = b[k];
        }
      },
      grain_for(n));
}

void sum_rows(const real* __restrict g, int64_t rows, int64_t n, real* __restrict out) {
  // Threads take column blocks, each summing all rows of its block in row order.
  parallel_for(
      n,
      [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) out[c] = 0;
        for (int64_t r = 0; r < rows; ++r) {
          const real* __restrict gr = g + r * n;
#pragma omp simd
          for (int64_t c = c0; c < c1; ++c) out[c] += gr[c];
        }
      },
      grain_for(rows));
}

namespace {
void check_rowwise(const Tensor& a, const char* op) {
  check_defined(a, op);
  if (a.dim() == 0) throw Error(std::string(op) + ": needs rank >= 1, got a scalar");
}
// The backward kernels' arguments: output y and its gradient g, same shape.
void check_rowwise_backward(const Tensor& g, const Tensor& y, const char* op) {
  check_rowwise(y, op);
  if (g.shape() != y.shape())
    throw Error(std::string(op) + ": grad " + to_string(g.shape()) + " vs output " +
                to_string(y.shape()));
}
}  // namespace

Tensor softmax(const Tensor& a) {
  check_rowwise(a, "softmax");
  Tensor out = a.clone();
  const int64_t n = a.size(-1);
  if (n > 0) softmax_rows(out.data(), a.numel() / n, n);
  return out;
}

Tensor log_softmax(const Tensor& a) {
  check_rowwise(a, "log_softmax");
  Tensor out = a.clone();
  const int64_t n = a.size(-1);
  if (n > 0) log_softmax_rows(out.data(), a.numel() / n, n);
  return out;
}

Tensor softmax_backward(const Tensor& g, const Tensor& y) {
  check_rowwise_backward(g, y, "softmax_backward");
  Tensor dx = Tensor::empty(y.shape());
  const int64_t n = y.size(-1), rows = n ? y.numel() / n : 0;
  const real* gp = g.data();
  const real* yp = y.data();
  real* dp = dx.data();
  parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const real* gr = gp + r * n;
          const real* yr = yp + r * n;
          real dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int64_t k = 0; k < n; ++k) dot += gr[k] * yr[k];
#pragma omp simd
          for (int64_t k = 0; k < n; ++k) dp[r * n + k] = yr[k] * (gr[k] - dot);
        }
      },
      grain_for(n));
  return dx;
}

Tensor log_softmax_backward(const Tensor& g, const Tensor& y) {
  check_rowwise_backward(g, y, "log_softmax_backward");
  // The same row loop as softmax_backward's, with this row formula (written
  // out, not shared through a callback, so each stays one readable loop).
  Tensor dx = Tensor::empty(y.shape());
  const int64_t n = y.size(-1), rows = n ? y.numel() / n : 0;
  const real* gp = g.data();
  const real* yp = y.data();
  real* dp = dx.data();
  parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          real gs = 0;
#pragma omp simd reduction(+ : gs)
          for (int64_t k = 0; k < n; ++k) gs += gp[r * n + k];
          for (int64_t k = 0; k < n; ++k)
            dp[r * n + k] = gp[r * n + k] - std::exp(yp[r * n + k]) * gs;
        }
      },
      grain_for(n));
  return dx;
}

}  // namespace qkv
