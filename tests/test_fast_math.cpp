// The vectorisable float32 exp / erf / GELU of core/fast_math.h against the
// standard library, computed in double.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/fast_math.h"

using namespace qkv;

TEST_CASE("fast_exp is within 3e-7 relative of exp over the whole float range, and exp(-inf) = 0") {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.001) {
    const double want = std::exp(static_cast<double>(static_cast<float>(x)));
    const double got = fast_exp(static_cast<float>(x));
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  INFO("worst relative error " << worst);
  CHECK(worst < 3e-7);
  CHECK(fast_exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(fast_exp(-100.0f) == 0.0f);
  CHECK(fast_exp(0.0f) == 1.0f);
  CHECK(std::isnan(fast_exp(std::numeric_limits<float>::quiet_NaN())));
}

// Error budget: 1.5e-7 from the Abramowitz & Stegun formula itself plus
// ~1e-7 from evaluating it in float32 near |erf| = 1 (ulp 6e-8 there).
TEST_CASE("fast_erf is within 3e-7 of erf, odd, and saturates at +-1") {
  double worst = 0;
  for (double x = -6.0; x <= 6.0; x += 0.0005) {
    const float xf = static_cast<float>(x);
    worst = std::max(worst, std::fabs(double(fast_erf(xf)) - std::erf(double(xf))));
    CHECK(fast_erf(-xf) == -fast_erf(xf));
  }
  INFO("worst absolute error " << worst);
  CHECK(worst < 3e-7);
  CHECK(fast_erf(10.0f) == 1.0f);
}

TEST_CASE("GELU and its derivative match the exact erf definition to float32 precision") {
  double worst_f = 0, worst_g = 0;
  for (double x = -10.0; x <= 10.0; x += 0.001) {
    const float xf = static_cast<float>(x);
    const double xd = xf;
    const double cdf = 0.5 * (1 + std::erf(xd / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
    worst_f =
        std::max(worst_f, std::fabs(gelu_scalar(xf) - xd * cdf) / std::max(1.0, std::fabs(xd)));
    worst_g = std::max(worst_g, std::fabs(gelu_grad_scalar(xf) - (cdf + xd * pdf)));
  }
  INFO("worst GELU error (relative to max(1,|x|)) " << worst_f << ", worst derivative error "
                                                    << worst_g);
  CHECK(worst_f < 3e-7);
  CHECK(worst_g < 5e-7);
}
