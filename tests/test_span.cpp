// Span corruption (data/span.h): T5's counts, the kept/hidden runs, the
// source and target it makes and how to read the original back, uniform cuts,
// determinism and bad options.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <vector>

#include "data/span.h"
#include "errors.h"
#include "test_seed.h"

using namespace qkv;
using namespace qkv::data;

using qkv::testing::check_error;
using qkv::testing::test_generator;

namespace {

SpanOptions options(int64_t n_sentinels) {
  SpanOptions o;
  for (int64_t i = 0; i < n_sentinels; ++i) o.sentinels.push_back(1000 + i);
  return o;
}

// The runs of equal values in a 0/1 mask, as (value, length).
std::vector<std::pair<int, int64_t>> runs(const std::vector<uint8_t>& m) {
  std::vector<std::pair<int, int64_t>> r;
  for (uint8_t v : m) {
    if (r.empty() || r.back().first != v) r.push_back({v, 0});
    ++r.back().second;
  }
  return r;
}

}  // namespace

TEST_CASE("span_counts: T5's round(0.15 L) hidden tokens in round(that / 3) spans, at least 1") {
  const SpanOptions o = options(0);
  // Worked by hand: L = 100: 15 hidden, 15 / 3 = 5 spans; L = 64: 9.6 -> 10
  // hidden, 3.33 -> 3 spans; L = 10: 1.5 -> 2 hidden, 0.67 -> 1 span; L = 2:
  // 0.3 -> clipped up to 1 hidden, 1 span; L = 512: 76.8 -> 77, 25.67 -> 26.
  const int64_t L[] = {100, 64, 10, 2, 512};
  const int64_t hidden[] = {15, 10, 2, 1, 77};
  const int64_t spans[] = {5, 3, 1, 1, 26};
  for (int i = 0; i < 5; ++i) {
    INFO("L = " << L[i]);
    const SpanCounts c = span_counts(L[i], o);
    CHECK(c.noise_tokens == hidden[i]);
    CHECK(c.spans == spans[i]);
    // One a span, one more for a span the rotation splits, and the closing one.
    CHECK(sentinels_needed(L[i], o) == spans[i] + 2);
  }
}

TEST_CASE(
    "span_noise_mask without rotation: kept and hidden runs alternate, starting kept, with "
    "T5's counts") {
  Generator g = test_generator();
  SpanOptions o = options(0);
  o.roll = false;
  for (int64_t L : {2, 3, 7, 20, 64, 100, 257}) {
    const SpanCounts c = span_counts(L, o);
    for (int rep = 0; rep < 50; ++rep) {
      const std::vector<uint8_t> m = span_noise_mask(L, o, g);
      REQUIRE(static_cast<int64_t>(m.size()) == L);
      int64_t n_hidden = 0;
      for (uint8_t v : m) n_hidden += v;
      CHECK(n_hidden == c.noise_tokens);
      const auto r = runs(m);
      REQUIRE(static_cast<int64_t>(r.size()) == 2 * c.spans);  // kept, hidden, ... each non-empty
      CHECK(r.front().first == 0);
      CHECK(r.back().first == 1);
    }
  }
}

TEST_CASE(
    "span_noise_mask rotated: T5's counts, a span more at most (one split by the wrap), and "
    "every position hidden alike") {
  Generator g = test_generator();
  const SpanOptions o = options(0);
  // L = 24: 4 hidden tokens in 1 span. Unrotated, the span would always be
  // the last 4 tokens; rotated, each position is hidden with probability 4/24.
  const int64_t L = 24, N = 6000;
  std::vector<int64_t> hidden_at(L, 0);
  int64_t split = 0;
  for (int64_t i = 0; i < N; ++i) {
    const std::vector<uint8_t> m = span_noise_mask(L, o, g);
    int64_t n = 0;
    for (int64_t p = 0; p < L; ++p) {
      hidden_at[static_cast<size_t>(p)] += m[static_cast<size_t>(p)];
      n += m[static_cast<size_t>(p)];
    }
    REQUIRE(n == 4);
    const auto r = runs(m);
    REQUIRE((r.size() == 2 || r.size() == 3));  // one span, or one split across the wrap
    split += r.size() == 3 && r.front().first == 1;
  }
  const double p = 4.0 / 24, sd = std::sqrt(double(N) * p * (1 - p));
  for (int64_t pos = 0; pos < L; ++pos) {
    INFO("position " << pos << " hidden " << hidden_at[static_cast<size_t>(pos)] << " of " << N);
    CHECK(std::fabs(double(hidden_at[static_cast<size_t>(pos)]) - double(N) * p) <= 5 * sd);
  }
  // A wrap splits the span for 3 of the 24 offsets (the cut inside the span).
  const double q = 3.0 / 24, sq = std::sqrt(double(N) * q * (1 - q));
  CHECK(std::fabs(double(split) - double(N) * q) <= 5 * sq);
}

TEST_CASE(
    "corrupt_spans: the source keeps a sentinel per span, the target lists them with their "
    "spans, and the two read back the original") {
  Generator g = test_generator();
  const SpanOptions o = options(40);
  Seq ids;
  for (int64_t i = 0; i < 120; ++i) ids.push_back(10 + (i * 7) % 50);
  for (int rep = 0; rep < 30; ++rep) {
    const Pair p = corrupt_spans(ids, o, g);
    const SpanCounts c = span_counts(120, o);
    // h spans (c.spans, or one more when the rotation split one). Source:
    // 120 - hidden tokens + one sentinel per span; target: the hidden tokens
    // + one sentinel per span + the closing one.
    const int64_t h = static_cast<int64_t>(p.src.size()) - (120 - c.noise_tokens);
    CHECK((h == c.spans || h == c.spans + 1));
    CHECK(static_cast<int64_t>(p.tgt.size()) == c.noise_tokens + h + 1);
    CHECK(p.tgt.front() == 1000);
    CHECK(p.tgt.back() == 1000 + h);
    // Read the original back: each sentinel in the source is replaced by the
    // target's tokens after the same sentinel, up to the next one.
    std::map<int64_t, Seq> span_of;
    int64_t cur = -1;
    for (int64_t t : p.tgt) {
      if (t >= 1000) {
        cur = t;
        span_of[cur];
      } else {
        span_of[cur].push_back(t);
      }
    }
    Seq back;
    int64_t next = 1000;
    for (int64_t t : p.src) {
      if (t >= 1000) {
        CHECK(t == next++);  // sentinels in order
        REQUIRE_FALSE(span_of[t].empty());
        back.insert(back.end(), span_of[t].begin(), span_of[t].end());
      } else {
        back.push_back(t);
      }
    }
    CHECK(back == ids);
  }
}

TEST_CASE("span_noise_mask cuts uniformly: 4 hidden tokens in 2 spans split 1+3, 2+2, 3+1 alike") {
  // L = 20, noise 0.2 -> 4 hidden tokens, mean span 2 -> 2 spans: the hidden
  // runs are (1,3), (2,2) or (3,1), each with probability 1/3.
  Generator g = test_generator();
  SpanOptions o = options(0);
  o.noise = 0.2;
  o.mean_span = 2;
  o.roll = false;
  const int64_t N = 6000;
  std::map<int64_t, int64_t> first_len;
  for (int64_t i = 0; i < N; ++i) {
    const auto r = runs(span_noise_mask(20, o, g));
    REQUIRE(r.size() == 4);
    ++first_len[r[1].second];
  }
  const double sd = std::sqrt(double(N) * (1.0 / 3) * (2.0 / 3));
  for (int64_t len : {1, 2, 3}) {
    INFO("first hidden span of length " << len << ": " << first_len[len] << " of " << N);
    CHECK(std::fabs(double(first_len[len]) - double(N) / 3) <= 5 * sd);
  }
}

TEST_CASE("corrupt_spans is deterministic given the generator") {
  const SpanOptions o = options(10);
  Seq ids(50, 7);
  for (int64_t i = 0; i < 50; ++i) ids[static_cast<size_t>(i)] = i;
  Generator a(42), b(42), c(43);
  const Pair pa = corrupt_spans(ids, o, a), pb = corrupt_spans(ids, o, b);
  CHECK(pa.src == pb.src);
  CHECK(pa.tgt == pb.tgt);
  bool differs = false;
  for (int i = 0; i < 5 && !differs; ++i) differs = corrupt_spans(ids, o, c).src != pa.src;
  CHECK(differs);
}

TEST_CASE("corrupt_spans refuses bad options, a sequence too short, too few sentinels") {
  Generator g = test_generator();
  SpanOptions o = options(10);
  check_error([&] { corrupt_spans({5}, o, g); }, {"corrupt_spans: a sequence of 1 tokens"});
  o.noise = 0;
  check_error([&] { corrupt_spans({5, 6, 7}, o, g); }, {"corrupt_spans: noise 0"});
  o.noise = 0.15;
  o.mean_span = 0.5;
  check_error([&] { corrupt_spans({5, 6, 7}, o, g); }, {"corrupt_spans: mean_span 0.5"});
  o = options(3);  // 100 tokens: 5 spans, 7 sentinels
  check_error([&] { corrupt_spans(Seq(100, 5), o, g); },
              {"corrupt_spans: a sequence of 100 tokens needs 7 sentinels, and 3 were given"});
  CHECK(sentinel_name(0) == "<extra_id_0>");
  CHECK(sentinel_name(99) == "<extra_id_99>");
}
