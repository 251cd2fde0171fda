// Decoding tests, float64 build. The float64 binary compiles only
// tests/test_*_grad.cpp; the decoding tests compute no gradient but are
// equality tests (cache vs recompute, beam 1 vs greedy, sampling limits vs
// greedy), which the float64 build checks to ~1e-12 instead of float32's ~1e-5.
#include "decode_tests.h"
#include "decode_head_size_tests.h"
#include "decode_kernel_tests.h"
#include "decode_gqa_rope_tests.h"
#include "decode_relative_tests.h"
