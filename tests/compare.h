// Shared helpers for comparing tensors: the float32 parity tests against
// PyTorch fixtures, bitwise equality, a module's count of numbers.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/elementwise.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "nn/module.h"

namespace qkv::testing {

// |got - want| <= atol + rtol |want| everywhere (want: a float64 reference
// rounded to float32); reports the worst difference.
inline void check_close(const Tensor& got, const Tensor& want, const std::string& what,
                        double rtol = 1e-5, double atol = 1e-6) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), what << ": shape " << to_string(got.shape())
                                                    << " vs " << to_string(want.shape()));
  INFO(what << ": max |qkv - torch| = " << max_abs_diff(got, want));
  CHECK(allclose(got, want, rtol, atol));
}

// The largest |element| of t (0 for an empty tensor).
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (real v : t.to_vector()) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

// check_close with the absolute tolerance scaled to the tensor: atol = 1e-6 *
// max(1, max|want|), rtol 1e-5 (check_close's own for a tensor whose elements
// are at most 1). An element that is a sum of many terms, such as a weight
// gradient summed over B*T rows, carries float32 rounding of a few ulp of
// those terms, which are of the size of the tensor's largest elements, not of
// that element: where gradients reach ~10 and some elements are ~0.01, the
// fixed atol 1e-6 is below that rounding. A wrong formula still misses by
// orders of magnitude more.
inline void check_close_to_scale(const Tensor& got, const Tensor& want, const std::string& what) {
  check_close(got, want, what, 1e-5, 1e-6 * std::max(1.0, max_abs(want)));
}

// Every parameter's gradient against the fixture's "<prefix><name>" tensors
// (float64 references rounded to float32). A gradient that is 0 in exact
// arithmetic, such as attention's key bias (softmax ignores a constant added
// to every score of a row), holds only rounding noise on both sides, and that
// noise depends on the instruction set and the order of the sums: comparing
// it with PyTorch's noise at a fixed 1e-6 passes on one machine and fails on
// another. Such a gradient (its float64 reference below 1e-12 of the largest
// reference gradient beside it) is checked against 0 instead, within
// `zero_rel` of that largest gradient: float32 noise is a few ulp of the
// numbers summed (~1e-7 relative), while a wrong gradient is of their size.
// to_scale: compare the others with check_close_to_scale instead of check_close.
template <class Params>
void check_param_grads(const Params& named_params, const TensorFile& f, const std::string& prefix,
                       const std::string& what, double zero_rel = 1e-5, bool to_scale = false) {
  double scale = 0;
  for (const auto& [name, p] : named_params) scale = std::max(scale, max_abs(f.get(prefix + name)));
  for (const auto& [name, p] : named_params) {
    const Tensor& want = f.get(prefix + name);
    const std::string label = what + " " + prefix + name;
    REQUIRE_MESSAGE(p.grad().defined(), label << ": no gradient");
    if (max_abs(want) <= 1e-12 * scale) {
      INFO(label << ": 0 in exact arithmetic; max |qkv| = " << max_abs(p.grad()) << ", bound "
                 << zero_rel * scale << " (" << zero_rel << " x the largest gradient beside it, "
                 << scale << ")");
      CHECK(max_abs(p.grad()) <= zero_rel * scale);
    } else if (to_scale) {
      check_close_to_scale(p.grad(), want, label);
    } else {
      check_close(p.grad(), want, label);
    }
  }
}

// Token ids / lengths stored as F32 in the fixtures.
inline std::vector<int64_t> ids_of(const Tensor& t) {
  std::vector<int64_t> ids;
  for (real v : t.to_vector()) ids.push_back(static_cast<int64_t>(std::lround(v)));
  return ids;
}

// The same shape and the same bits in every element (a rerun, a resumed run).
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), sizeof(real) * size_t(a.numel())) == 0;
}

// The numbers a module holds, counted from its parameters (what a
// configuration's parameter count is checked against).
inline double numbers_in(const nn::Module& m) {
  double n = 0;
  for (const auto& [name, p] : m.named_parameters()) n += double(p.data().numel());
  return n;
}

}  // namespace qkv::testing
