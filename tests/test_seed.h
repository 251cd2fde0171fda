// The one rule for the seeds of random test inputs: a test's seed comes from
// its own name.
//
//   Generator g = test_generator();    // this test's inputs
//   Generator h = test_generator(1);   // a second, independent stream
//
//   test_seed(stream) = FNV-1a 64 of (the running TEST_CASE's name, then the
//                       8 bytes of `stream`) + QKV_TEST_SEED
//
// QKV_TEST_SEED is read once from the environment (default 0), so
// `QKV_TEST_SEED=7 make test` re-runs every test on other random inputs. Each
// test draws its own numbers: adding, removing or filtering tests (-tc=...)
// changes no other test's inputs, and the streams of one test are unrelated
// (Generator seeds through splitmix64, so even seeds 1 apart are). A test must
// hold for every seed: when one fails, fix the test's design (ties, a
// tolerance that is not a bound), never pick a seed that happens to pass.
// Streams 0-99 are the test's own; helpers in tests/*.h that draw numbers of
// their own use the named streams from 100 up below, so that a test's
// test_generator() never repeats a helper's numbers.
//
// tests/main.cpp's listener tells this header which test is running, prints
// QKV_TEST_SEED at the start of a run when it is not 0, and prints it again
// under a failed test case that drew a seed.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "core/generator.h"

namespace qkv::testing {

namespace detail {
struct RunningTest {
  bool running = false;
  std::string name;        // the running TEST_CASE's name
  uint64_t entries = 0;    // test case starts and subcase re-entries so far
  bool drew_seed = false;  // whether it called test_seed()
};
inline RunningTest& running_test() {
  static RunningTest t;
  return t;
}
}  // namespace detail

// For tests/main.cpp's listener: a test case starts, re-enters (to run its
// next subcase), ends.
inline void test_case_started(const std::string& name) {
  detail::RunningTest& t = detail::running_test();
  t.running = true;
  t.name = name;
  ++t.entries;
  t.drew_seed = false;
}
inline void test_case_reentered() { ++detail::running_test().entries; }
inline void test_case_ended() { detail::running_test().running = false; }
inline bool test_case_drew_seed() { return detail::running_test().drew_seed; }

// QKV_TEST_SEED as a decimal integer, 0 when unset; anything else throws.
inline uint64_t test_seed_offset() {
  static const uint64_t offset = [] {
    const char* s = std::getenv("QKV_TEST_SEED");
    if (!s || !*s) return uint64_t{0};
    const std::string text = s;
    if (text.find_first_not_of("0123456789") != std::string::npos || text.size() > 19)
      throw std::invalid_argument("QKV_TEST_SEED=" + text +
                                  ": expected a decimal integer below 10^19");
    return static_cast<uint64_t>(std::stoull(text));
  }();
  return offset;
}

// The streams of the helpers in tests/*.h.
constexpr uint64_t kUpstreamGradStream = 100;  // fused_vs_composed.h: the upstream gradient
constexpr uint64_t kDecodeModelStream = 101;   // decode_tests.h: the models' c.seed

inline uint64_t test_seed(uint64_t stream = 0) {
  detail::RunningTest& t = detail::running_test();
  if (!t.running)
    throw std::logic_error(
        "test_seed() called outside a running TEST_CASE (a static initialiser?)");
  t.drew_seed = true;
  // FNV-1a 64: from the offset basis, xor in each byte, then multiply by the prime.
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](unsigned char byte) { h = (h ^ byte) * 0x100000001b3ULL; };
  for (char c : t.name) mix(static_cast<unsigned char>(c));
  for (int i = 0; i < 8; ++i) mix(static_cast<unsigned char>(stream >> (8 * i)));
  return h + test_seed_offset();
}

inline Generator test_generator(uint64_t stream = 0) { return Generator(test_seed(stream)); }

// One generator for a whole test case, for files whose small input helpers
// (randn(shape), ...) share a generator instead of taking one: seeded with
// test_seed() when a test case (or its next subcase pass) first asks, so that,
// like a local test_generator(), its numbers do not depend on which tests ran
// before.
inline Generator& test_case_generator() {
  static Generator g;
  static uint64_t seeded_in = 0;  // running_test().entries when g was seeded; 0: never
  const detail::RunningTest& t = detail::running_test();
  if (!t.running || seeded_in != t.entries) {
    g.manual_seed(test_seed());  // throws outside a test case
    seeded_in = t.entries;
  }
  return g;
}

}  // namespace qkv::testing
