// float32: the small-product cases of tests/gemm_small_cases.h.
#include "gemm_small_cases.h"
