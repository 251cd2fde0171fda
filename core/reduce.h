// Reductions and the row-wise softmax family, over contiguous tensors.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace qkv {

// Over one axis (negative counts from the end). keepdim keeps it as size 1.
Tensor sum(const Tensor& a, int axis, bool keepdim = false);
Tensor mean(const Tensor& a, int axis, bool keepdim = false);
Tensor max(const Tensor& a, int axis, bool keepdim = false);
// The max and, for each output element, the flat index into `a` of the
// element that won (the first one on ties): what max's backward routes to.
Tensor max_with_index(const Tensor& a, int axis, bool keepdim, std::vector<int64_t>& index);

// Over all elements, as a rank-0 tensor.
Tensor sum(const Tensor& a);
Tensor mean(const Tensor& a);
Tensor max(const Tensor& a);

// Softmax over the last axis, numerically stable (the row max is subtracted).
Tensor softmax(const Tensor& a);
Tensor log_softmax(const Tensor& a);
// Backward kernels given the forward output y and upstream gradient g:
//   softmax:     dx = y * (g - sum(g * y))      (row sums)
//   log_softmax: dx = g - exp(y) * sum(g)
Tensor softmax_backward(const Tensor& g, const Tensor& y);
Tensor log_softmax_backward(const Tensor& g, const Tensor& y);

// Row kernels on a (rows, n) block, used by fused layers too. This is the one
// softmax of the library: softmax(Tensor), the autograd op, attention and
// cross-entropy all call it.
//   p = softmax(x) row by row (p may be x); a fully masked row (all -inf) gives zeros.
//   sums, when given (rows entries): each row's log-sum-exp and sum of x, in double.
struct RowSums {
  double lse = 0;    // log(sum_k exp(x[k]))
  double sum_x = 0;  // sum_k x[k]
};
void softmax_rows(const real* x, real* p, int64_t rows, int64_t n, RowSums* sums = nullptr);
void softmax_rows(real* x, int64_t rows, int64_t n);  // in place
void log_softmax_rows(real* x, int64_t rows, int64_t n);

// Raw (rows, n) block kernels of the bias of a linear map:
//   broadcast_rows: y[r, :] = b           (so a gemm with beta = 1 adds onto the bias)
//   sum_rows:       out = sum_r g[r, :]   (the bias gradient)
void broadcast_rows(real* y, int64_t rows, int64_t n, const real* b);
void sum_rows(const real* g, int64_t rows, int64_t n, real* out);

}  // namespace qkv
