// float64 (built with -DQKV_DOUBLE like every *_grad.cpp): the small-product
// cases of tests/gemm_small_cases.h, on libxsmm's double kernels.
#include "gemm_small_cases.h"
