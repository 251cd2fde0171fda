// qkv::gradcheck: compares every analytic gradient with central finite
// differences, like torch.autograd.gradcheck. Meant for the float64 build
// (-DQKV_DOUBLE), where errors sit near 1e-9 and a wrong formula shows up
// orders of magnitude above the tolerance.
//
// f maps the inputs to any-shaped output y. We check the gradient of the
// scalar L = sum(y * R) for a fixed random R (a vector-Jacobian product, which
// exercises every entry of the Jacobian), for every element of every input
// that requires grad: numeric (L(x + eps) - L(x - eps)) / (2 eps) vs analytic.
#pragma once
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "autograd/var.h"

namespace qkv {

// The random projection R's seed: any fixed value, so that a failing check
// fails the same way, at the same element, on every run.
inline constexpr uint64_t kGradcheckSeed = 1234;

struct GradcheckOptions {
#ifdef QKV_DOUBLE
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-5;
#else
  // float32 cannot do better; prefer the float64 build.
  double eps = 1e-2;
  double atol = 1e-2;
  double rtol = 1e-2;
#endif
  uint64_t seed = kGradcheckSeed;  // for the random projection R
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_err = 0;  // worst |analytic - numeric|
  double max_rel_err =
      0;  // worst |analytic - numeric| / max(|numeric|, 1e-12), over elements off by more than atol
  int64_t checked = 0;  // number of elements compared
  // First failure (input position in `inputs`, flat element index), or -1.
  int fail_input = -1;
  int64_t fail_index = -1;
  double fail_analytic = 0, fail_numeric = 0;
  std::string report;  // one readable paragraph
};

// Inputs must be leaf Vars; those with requires_grad are checked. f must be
// deterministic (no dropout). The inputs' data are perturbed in place and
// restored; their .grad() is left as it was.
GradcheckResult gradcheck(const std::function<Var(const std::vector<Var>&)>& f,
                          const std::vector<Var>& inputs, const GradcheckOptions& opt = {});

std::ostream& operator<<(std::ostream& os, const GradcheckResult& r);

}  // namespace qkv
