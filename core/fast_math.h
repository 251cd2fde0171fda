// exp, erf and GELU written so that loops over contiguous floats vectorise:
// no libm call, no branch, only +, *, /, conversions and selects.
//
// float32 build: exp to < 1e-7 relative error, erf to < 3e-7 absolute
// (1.5e-7 from the formula, the rest float32 rounding); that is below what float32 storage keeps
// anyway. float64 build (-DQKV_DOUBLE, the gradient-check build): the exact std::exp and std::erf,
// so finite differences stay tight.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/real.h"

namespace qkv {

#ifdef QKV_DOUBLE
inline real fast_exp(real x) { return std::exp(x); }
inline real fast_erf(real x) { return std::erf(x); }
#else
// exp(x) = 2^k exp(r), k = round(x / ln 2), |r| <= ln(2)/2. exp(r) by its
// Taylor series to r^7 (remainder < 2e-8 relative on that interval), 2^k
// by writing the exponent bits. Below -87.3 (where float exp underflows) the
// result is 0 exactly, so exp(-inf) = 0 as softmax's masks need.
inline float fast_exp(float x) {
  const float xc = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  // Round to nearest by adding and removing 1.5 * 2^23.
  const float kf = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // r = x - k ln 2, with ln 2 split in two parts so k ln 2 is exact enough.
  const float r = (xc - kf * 0.693145751953125f) - kf * 1.42860682030941723e-6f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^k as a float. A NaN x gives a NaN p; k must still be a valid int (converting
  // NaN is undefined behaviour; it reached here from a NaN attention score).
  const int32_t bits = (static_cast<int32_t>(kf == kf ? kf : 0.0f) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -87.3f ? 0.0f : p * scale;
}

// erf(x) = 1 - t (a1 + a2 t + ... + a5 t^4) exp(-x^2), t = 1 / (1 + p |x|),
// for x >= 0 (odd symmetry for x < 0): Abramowitz & Stegun 7.1.26,
// |error| <= 1.5e-7 in exact arithmetic. `e` is exp(-x^2), passed in when the caller has it.
inline float erf_with_exp(float x, float e) {
  const float ax = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float poly = 1.061405429f;
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  const float y = std::copysign(1.0f - poly * t * e, x);
  // Near 0 that difference cancels; there the odd series is better:
  // erf(x) = 2/sqrt(pi) (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320),
  // next term < 2e-8 for |x| < 0.5.
  const float x2 = x * x;
  float s = -1.0f / 1320;
  s = s * x2 + 1.0f / 216;
  s = s * x2 - 1.0f / 42;
  s = s * x2 + 1.0f / 10;
  s = s * x2 - 1.0f / 3;
  s = s * x2 + 1.0f;
  const float small = 1.12837916709551257f * x * s;
  return ax < 0.5f ? small : y;
}
inline float fast_erf(float x) { return erf_with_exp(x, fast_exp(-x * x)); }
#endif

// GELU, exact form (PyTorch's default): x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2.
inline real gelu_scalar(real x) {
  const real z = x * real(0.70710678118654752440);
  return real(0.5) * x * (real(1) + fast_erf(z));
}

// d/dx [x Phi(x)] = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
// One exp serves both terms: exp(-z^2) with z = x / sqrt 2 is exp(-x^2 / 2).
inline real gelu_grad_scalar(real x) {
  const real z = x * real(0.70710678118654752440);
  const real e = fast_exp(-z * z);
#ifdef QKV_DOUBLE
  const real cdf = real(0.5) * (real(1) + std::erf(z));
#else
  const real cdf = real(0.5) * (real(1) + erf_with_exp(z, e));
#endif
  return cdf + x * real(0.39894228040143267794) * e;
}

}  // namespace qkv
