// Decoding tests, float32 build: see tests/decode_tests.h.
#include "decode_tests.h"
#include "decode_head_size_tests.h"
#include "decode_kernel_tests.h"
#include "decode_gqa_rope_tests.h"
#include "decode_relative_tests.h"
