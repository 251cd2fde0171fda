// qkv::Generator: the one source of randomness. xoshiro256** seeded through
// splitmix64, with our own uniform and normal transforms, so a seed gives the
// same numbers on every machine and standard library.
#pragma once
#include <cstdint>

namespace qkv {

// 2^64 / golden ratio (odd): splitmix64's increment, whose bits look random.
// XORed into a model's seed it gives the dropout stream a seed of its own,
// unrelated to the initialisation stream's (nn::dropout_seed).
constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// The seed of a Generator made without one (and of the default generator):
// any fixed value makes runs repeatable; this one spells "seed".
constexpr uint64_t kDefaultSeed = 0x5eed;

class Generator {
 public:
  explicit Generator(uint64_t seed = kDefaultSeed) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  // Defined here, inline: a loop drawing one number an element (dropout's
  // masks) pays no call for each.
  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // [0, 1): the top 53 bits of next_u64(), times 2^-53.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double normal();                          // standard normal (Box-Muller)
  int64_t randint(int64_t lo, int64_t hi);  // uniform in [lo, hi)
  // The full state, so a checkpoint can resume the exact random stream.
  struct State {
    uint64_t s[4];
    double cached_normal;
    bool has_cached;
  };
  State state() const;
  void set_state(const State& st);

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
  double cached_normal_ = 0;
  bool has_cached_ = false;
};

// The process-wide default generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace qkv
