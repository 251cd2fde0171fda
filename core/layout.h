// Moving dimensions around. Both return a new contiguous tensor (a copy), so
// every kernel downstream can assume row-major contiguous data.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace qkv {

// out.shape[i] = a.shape[dims[i]]; dims must be a permutation of 0..rank-1
// (negative entries count from the end).
Tensor permute(const Tensor& a, const std::vector<int>& dims);
// Swaps two dimensions: permute by transpose_dims (shared with autograd's transpose).
Tensor transpose(const Tensor& a, int d0, int d1);
std::vector<int> transpose_dims(const Shape& shape, int d0,
                                int d1);  // 0..rank-1 with d0, d1 swapped
// The inverse permutation of `dims`, for permute's backward.
std::vector<int> inverse_permutation(const std::vector<int>& dims);

}  // namespace qkv
