// Masked language modelling's masking (data/mlm.h): how many positions are
// chosen, which may be, the 80/10/10 split, determinism and bad options.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "data/mlm.h"
#include "errors.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::data;

using qkv::testing::check_error;
using qkv::testing::test_generator;

namespace {

MlmOptions options(int64_t vocab) {
  MlmOptions o;
  o.mask_id = 3;
  o.first_random_id = 4;
  o.vocab = vocab;
  return o;
}

// |count - N p| <= 5 sqrt(N p (1 - p)): a Binomial(N, p) count lies outside
// with probability below 1e-6.
void check_binomial(int64_t count, int64_t N, double p, const char* what) {
  const double sd = std::sqrt(double(N) * p * (1 - p));
  INFO(what << ": " << count << " of " << N << ", expected " << double(N) * p << " +- 5 x " << sd);
  CHECK(std::fabs(double(count) - double(N) * p) <= 5 * sd);
}

}  // namespace

TEST_CASE("mask_for_mlm chooses max(1, round(0.15 n)) of the n choosable positions, none of none") {
  Generator g = test_generator();
  const MlmOptions o = options(50);
  for (int64_t n = 0; n <= 40; ++n) {
    // <s>, n words, </s>, with a <pad> and a [MASK] among them: n choosable
    Seq ids = {1};
    for (int64_t i = 0; i < n; ++i) ids.push_back(4 + g.randint(0, 46));
    ids.insert(ids.begin() + ids.size() / 2, 3);
    ids.push_back(2);
    ids.push_back(0);
    const Pair p = mask_for_mlm(ids, o, g);
    REQUIRE(p.src.size() == ids.size());
    REQUIRE(p.tgt.size() == ids.size());
    int64_t chosen = 0;
    for (size_t i = 0; i < ids.size(); ++i)
      if (p.tgt[i] != kPad) {
        ++chosen;
        CHECK(p.tgt[i] == ids[i]);  // the original id
      } else {
        CHECK(p.src[i] == ids[i]);  // not chosen: as it was
      }
    const int64_t want = n == 0 ? 0 : std::max<int64_t>(1, std::llround(0.15 * double(n)));
    INFO("n = " << n);
    CHECK(chosen == want);
  }
}

TEST_CASE(
    "mask_for_mlm never chooses a special token or [MASK], and draws random tokens past them") {
  Generator g = test_generator();
  MlmOptions o = options(12);
  o.rate = 1;  // every choosable position chosen
  const Seq ids = {1, 0, 4, 2, 3, 11, 5, 2, 0, 3};
  int64_t random_seen = 0;
  for (int draw = 0; draw < 500; ++draw) {
    const Pair p = mask_for_mlm(ids, o, g);
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool choosable = ids[i] >= 4;
      CHECK((p.tgt[i] != kPad) == choosable);
      if (!choosable) CHECK(p.src[i] == ids[i]);
      if (choosable && p.src[i] != 3 && p.src[i] != ids[i]) {
        ++random_seen;
        CHECK(p.src[i] >= 4);
        CHECK(p.src[i] < 12);
      }
    }
  }
  CHECK(random_seen > 0);
}

TEST_CASE(
    "mask_for_mlm: 80% [MASK], 10% random, 10% unchanged, and every position equally likely") {
  Generator g = test_generator();
  const int64_t V = 24, K = V - 4;  // random replacements from K ids, the original among them
  const MlmOptions o = options(V);
  const int64_t n = 40, draws = 2000;  // 6 chosen per draw: N = 12000
  Seq ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = 4 + (i * 7) % K;
  int64_t N = 0, masked = 0, changed = 0, unchanged = 0;
  std::vector<int64_t> chosen_at(n, 0);
  for (int64_t d = 0; d < draws; ++d) {
    const Pair p = mask_for_mlm(ids, o, g);
    for (int64_t i = 0; i < n; ++i) {
      if (p.tgt[i] == kPad) continue;
      ++N;
      ++chosen_at[i];
      if (p.src[i] == 3)
        ++masked;
      else if (p.src[i] != ids[i])
        ++changed;
      else
        ++unchanged;
    }
  }
  REQUIRE(N == draws * 6);
  // A random draw equal to the original reads as unchanged: P = 0.1 / K.
  check_binomial(masked, N, 0.8, "[MASK]");
  check_binomial(changed, N, 0.1 * (1 - 1.0 / double(K)), "a random other token");
  check_binomial(unchanged, N, 0.1 + 0.1 / double(K), "unchanged");
  for (int64_t i = 0; i < n; ++i) check_binomial(chosen_at[i], draws, 6.0 / double(n), "position");
}

TEST_CASE("mask_for_mlm is deterministic given the generator") {
  const MlmOptions o = options(30);
  Seq ids;
  for (int64_t i = 0; i < 60; ++i) ids.push_back(4 + i % 26);
  Generator a(7), b(7), c(8);
  for (int k = 0; k < 5; ++k) {
    const Pair pa = mask_for_mlm(ids, o, a), pb = mask_for_mlm(ids, o, b);
    CHECK(pa.src == pb.src);
    CHECK(pa.tgt == pb.tgt);
  }
  // Another seed: another choice (9 of 60 positions; the same one has odds ~1e-11).
  Generator a2(7);
  CHECK(mask_for_mlm(ids, o, a2).tgt != mask_for_mlm(ids, o, c).tgt);
}

TEST_CASE("mask_for_mlm refuses bad options and ids, naming them") {
  Generator g = test_generator();
  MlmOptions o = options(10);
  o.rate = 0;
  check_error([&] { mask_for_mlm({1, 5, 2}, o, g); }, {"mask_for_mlm: rate", "(0, 1]"});
  o = options(10);
  o.first_random_id = 10;
  check_error([&] { mask_for_mlm({1, 5, 2}, o, g); }, {"first_random_id 10", "vocab = 10"});
  o = options(10);
  o.mask_id = -1;
  check_error([&] { mask_for_mlm({1, 5, 2}, o, g); }, {"mask_id -1"});
  check_error(
      [&] {
        mask_for_mlm({1, 12, 2}, options(10), g);
      },
      {"id 12 at position 1", "vocab = 10"});
}
