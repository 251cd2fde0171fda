// Decoding tests, float32 build: see tests/decode_tests.h.
#include "decode_tests.h"
