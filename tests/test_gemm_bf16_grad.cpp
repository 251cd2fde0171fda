// The float64 build (gradient checks) keeps every product in float64: it
// refuses bf16 products rather than round its operands (docs/precision.md).
#include <doctest/doctest.h>

#include "errors.h"

#include "core/qkv_core.h"

using namespace qkv;
using qkv::testing::error_of;
using qkv::testing::has;

TEST_CASE("the float64 build refuses bf16 products and stays at fp32 (float64) precision") {
  const std::string msg = error_of([] { set_matmul_precision(MatmulPrecision::bf16); });
  CHECK(has(msg, "set_matmul_precision: bf16 products need the float32 build"));
  CHECK(matmul_precision() == MatmulPrecision::fp32);
  set_matmul_precision(MatmulPrecision::fp32);  // allowed: what it is
}
