// Matrix products on tensors, through gemm (sgemm) with transpose flags.
#pragma once
#include "core/tensor.h"

namespace qkv {

// op(a) @ op(b) where op transposes the last two dimensions when the flag is
// set (no copy: the flag goes to sgemm). a: (..., M, K) [or (..., K, M) if
// trans_a], b: (..., K, N) [or (..., N, K)]. Leading (batch) dimensions
// broadcast like NumPy. Both operands need rank >= 2.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace qkv
