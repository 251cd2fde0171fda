#include "core/generator.h"

#include <cmath>

#include "core/error.h"

namespace qkv {
namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += kGoldenGamma);
  // splitmix64's mixing constants (Steele, Lea and Flood 2014).
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

void Generator::manual_seed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& w : s_) w = splitmix64(x);
  has_cached_ = false;
}

double Generator::normal() {
  if (has_cached_) {
    has_cached_ = false;
    return cached_normal_;
  }
  // Box-Muller: two uniforms -> two independent standard normals.
  double u1 = uniform();
  while (u1 <= 0.0) u1 = uniform();
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double a = 2.0 * M_PI * u2;
  cached_normal_ = r * std::sin(a);
  has_cached_ = true;
  return r * std::cos(a);
}

int64_t Generator::randint(int64_t lo, int64_t hi) {
  if (hi <= lo)
    throw Error("randint: empty range [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
  const uint64_t span = static_cast<uint64_t>(hi - lo);
  // Rejection sampling keeps the distribution exactly uniform.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  uint64_t r;
  do r = next_u64();
  while (r >= limit);
  return lo + static_cast<int64_t>(r % span);
}

Generator::State Generator::state() const {
  State st{};
  for (int i = 0; i < 4; ++i) st.s[i] = s_[i];
  st.cached_normal = cached_normal_;
  st.has_cached = has_cached_;
  return st;
}

void Generator::set_state(const State& st) {
  for (int i = 0; i < 4; ++i) s_[i] = st.s[i];
  cached_normal_ = st.cached_normal;
  has_cached_ = st.has_cached;
}

Generator& default_generator() {
  static Generator g;
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace qkv
