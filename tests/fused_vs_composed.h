// Test helper for the fused layers: run the fused op and the same maths composed
// from primitive autograd ops on identical inputs, push the same random upstream
// gradient through both, and compare the outputs and every input's gradient.
// Meant for the float64 build, where the two agree to rounding (~1e-14). The
// upstream gradient is drawn from the running test's seed (test_seed.h).
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "autograd/var.h"
#include "core/elementwise.h"
#include "test_seed.h"

namespace qkv::testing {

using VarFn = std::function<Var(const std::vector<Var>&)>;

// Inputs are leaf Vars; those with requires_grad get their gradients compared.
// Their .grad() is cleared before and after.
inline void check_fused_equals_composed(const VarFn& fused, const VarFn& composed,
                                        const std::vector<Var>& inputs, double tol = 1e-9,
                                        uint64_t seed = test_seed(kUpstreamGradStream)) {
  for (Var v : inputs) v.clear_grad();
  Var yf = fused(inputs);
  Var yc = composed(inputs);
  REQUIRE(yf.shape() == yc.shape());
  const double out_diff = max_abs_diff(yf.data(), yc.data());
  INFO("output max |fused - composed| = " << out_diff);
  CHECK(out_diff < tol);

  Generator g(seed);
  const Tensor up = Tensor::normal(yf.shape(), 0, 1, g);
  yf.backward(up);
  std::vector<Tensor> gf;
  for (Var v : inputs) {
    gf.push_back(v.requires_grad() ? v.grad().clone() : Tensor());
    v.clear_grad();
  }
  yc.backward(up);
  for (size_t i = 0; i < inputs.size(); ++i) {
    Var v = inputs[i];
    if (!v.requires_grad()) continue;
    REQUIRE(gf[i].defined());
    REQUIRE(v.grad().defined());
    const double d = max_abs_diff(gf[i], v.grad());
    INFO("input " << i << " " << (v.name().empty() ? std::string("") : v.name())
                  << ": gradient max |fused - composed| = " << d);
    CHECK(d < tol);
    v.clear_grad();
  }
}

}  // namespace qkv::testing
