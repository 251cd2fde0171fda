// Shared helpers for the float32 parity tests against PyTorch fixtures.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/elementwise.h"
#include "core/tensor.h"

namespace qkv::testing {

// |got - want| <= atol + rtol |want| everywhere (want: a float64 reference
// rounded to float32); reports the worst difference.
inline void check_close(const Tensor& got, const Tensor& want, const std::string& what,
                        double rtol = 1e-5, double atol = 1e-6) {
  REQUIRE_MESSAGE(got.shape() == want.shape(),
                  what << ": shape " << to_string(got.shape()) << " vs " << to_string(want.shape()));
  INFO(what << ": max |qkv - torch| = " << max_abs_diff(got, want));
  CHECK(allclose(got, want, rtol, atol));
}

// Token ids / lengths stored as F32 in the fixtures.
inline std::vector<int64_t> ids_of(const Tensor& t) {
  std::vector<int64_t> ids;
  for (real v : t.to_vector()) ids.push_back(static_cast<int64_t>(std::lround(v)));
  return ids;
}

}  // namespace qkv::testing
