// Moving dimensions around. Both return a new contiguous tensor (a copy), so
// every kernel downstream can assume row-major contiguous data.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace qkv {

// out.shape[i] = a.shape[dims[i]]; dims must be a permutation of 0..rank-1
// (negative entries count from the end).
Tensor permute(const Tensor& a, const std::vector<int>& dims);
// Swaps two dimensions.
Tensor transpose(const Tensor& a, int d0, int d1);
// The inverse permutation of `dims`, for permute's backward.
std::vector<int> inverse_permutation(const std::vector<int>& dims);

}  // namespace qkv
