// Checks for tests that call an op's backward on each thread of an outer
// parallel region (outer_region.h): every thread's list of gradients must
// equal the list computed outside the region. Call after the region: doctest's
// CHECK is not thread-safe.
#pragma once
#include <doctest/doctest.h>

#include <array>
#include <vector>

#include "core/qkv_core.h"

namespace qkv::testing {

inline void check_each_thread_matches(const std::array<std::vector<Tensor>, 2>& per_thread,
                                      const std::vector<Tensor>& serial, double tol) {
  for (const auto& got : per_thread) {
    if (got.empty()) continue;  // a runtime that gave the region one thread
    REQUIRE(got.size() == serial.size());
    for (size_t i = 0; i < serial.size(); ++i) {
      CAPTURE(i);
      CHECK(max_abs_diff(got[i], serial[i]) < tol);
    }
  }
}

}  // namespace qkv::testing
