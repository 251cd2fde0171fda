// check_mat: a walk-through's matrix (examples/by_hand.h's step::Mat, row
// major) against values worked on paper, element by element within `tol`;
// a failure names the matrix and the element. Shared by the tests of make
// step (tests/test_step_through.cpp) and of worked_example
// (tests/test_worked_example.cpp).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "examples/by_hand.h"

namespace qkv::testing {

inline void check_mat(const step::Mat& m, const std::vector<double>& want, double tol,
                      const char* what) {
  REQUIRE_MESSAGE(m.a.size() == want.size(), what);
  for (size_t i = 0; i < want.size(); ++i)
    CHECK_MESSAGE(std::fabs(m.a[i] - want[i]) <= tol,
                  std::string(what) << "[" << i << "] = " << m.a[i] << ", want " << want[i]);
}

}  // namespace qkv::testing
