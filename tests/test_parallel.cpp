// Threading: results must not depend on the thread count (bitwise for
// elementwise kernels, to rounding for sums), and bad counts are rejected.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "compare.h"

#include "core/qkv_core.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::bitwise_equal;
using qkv::testing::test_generator;

namespace {
// Sets the thread count for a scope and restores the previous one after.
struct ThreadScope {
  int prev;
  explicit ThreadScope(int n) : prev(get_num_threads()) { set_num_threads(n); }
  ~ThreadScope() { set_num_threads(prev); }
};

// Runs f once with 1 thread and once with 2 and returns both results.
template <class F>
std::pair<Tensor, Tensor> with_1_and_2_threads(F f) {
  Tensor one, two;
  {
    ThreadScope t(1);
    one = f();
  }
  {
    ThreadScope t(2);
    two = f();
  }
  return {one, two};
}
const int64_t kBig = 1 << 20;  // well above kParallelGrain: really splits over threads
}  // namespace

TEST_CASE("set_num_threads takes effect and get_num_threads reports it") {
  const int prev = get_num_threads();
  CHECK(prev >= 1);
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  set_num_threads(2);
  CHECK(get_num_threads() == 2);
  set_num_threads(prev);
  CHECK(get_num_threads() == prev);
}

TEST_CASE("set_num_threads(0) and negative counts throw and leave the setting alone") {
  const int prev = get_num_threads();
  CHECK_THROWS_AS(set_num_threads(0), Error);
  CHECK_THROWS_AS(set_num_threads(-3), Error);
  try {
    set_num_threads(0);
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("set_num_threads") != std::string::npos);
  }
  CHECK(get_num_threads() == prev);
}

TEST_CASE("parallel_for covers [0, n) exactly once with 2 threads") {
  ThreadScope t(2);
  std::vector<int> hits(kBig, 0);
  parallel_for(kBig, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  bool once = true;
  for (int h : hits) once = once && h == 1;
  CHECK(once);
  // Below the grain, and n = 0, run on the caller (or not at all).
  int calls = 0;
  parallel_for(10, [&](int64_t b, int64_t e) {
    calls++;
    CHECK(b == 0);
    CHECK(e == 10);
  });
  CHECK(calls == 1);
  parallel_for(0, [&](int64_t, int64_t) { calls++; });
  CHECK(calls == 1);
}

TEST_CASE("large elementwise ops give bitwise identical results with 1 and 2 threads") {
  Generator g = test_generator();
  const Tensor a = Tensor::normal({kBig}, 0, 1, g);
  const Tensor b = Tensor::uniform({kBig}, 0.5, 2, g);
  const Tensor row = Tensor::normal({1024}, 0, 1, g);
  const std::vector<std::pair<const char*, std::function<Tensor()>>> ops = {
      {"mul", [&] { return mul(a, b); }},
      {"div", [&] { return div(a, b); }},
      {"gelu", [&] { return gelu(a); }},
      {"exp", [&] { return exp(a); }},
      {"tanh", [&] { return tanh(a); }},
      {"sigmoid", [&] { return sigmoid(a); }},
      {"add broadcast (1024,1024)+(1024)",
       [&] {
         return add(a.reshape({1024, 1024}), row);
       }},
      {"gelu_backward", [&] { return gelu_backward(b, a); }},
      {"fill_", [&] { return Tensor::empty({kBig}).fill_(real(0.25)); }},
      {"add_", [&] { return a.clone().add_(b, real(0.5)); }},
      {"permute",
       [&] {
         return permute(a.reshape({64, 128, 128}), {2, 0, 1});
       }},
      {"softmax rows", [&] {
         return softmax(a.reshape({4096, 256}));
       }}};
  for (const auto& [name, f] : ops) {
    INFO(name);
    auto [one, two] = with_1_and_2_threads(f);
    CHECK(bitwise_equal(one, two));
    // bitwise_equal takes a NaN with the same bits as equal: the ops' outputs
    // here are finite, so one from a broken split is caught.
    CHECK(
        std::all_of(one.data(), one.data() + one.numel(), [](real v) { return std::isfinite(v); }));
  }
}

TEST_CASE("large sums agree with 1 and 2 threads within 1e-5 relative") {
  Generator g = test_generator();
  const Tensor a = Tensor::uniform({kBig}, 0, 1, g);  // positive: no cancellation
  auto [one, two] = with_1_and_2_threads([&] { return sum(a); });
  CHECK(one.item() == doctest::Approx(two.item()).epsilon(1e-5));
  double ref = 0;
  for (int64_t i = 0; i < a.numel(); ++i) ref += a.data()[i];
  CHECK(one.item() == doctest::Approx(ref).epsilon(1e-5));
  CHECK(two.item() == doctest::Approx(ref).epsilon(1e-5));
  // Row sums and column sums of a (1024, 1024) view, and sum_to (bias gradients).
  const Tensor m = a.reshape({1024, 1024});
  for (int axis : {0, 1}) {
    INFO("axis " << axis);
    auto [r1, r2] = with_1_and_2_threads([&] { return sum(m, axis); });
    CHECK(max_abs_diff(r1, r2) <= 1e-5 * 1024);
  }
  auto [s1, s2] = with_1_and_2_threads([&] { return sum_to(m, {1024}); });
  CHECK(max_abs_diff(s1, s2) <= 1e-5 * 1024);
}

TEST_CASE("batched matmul gives the same result with 1 and 2 threads") {
  Generator g = test_generator();
  const Tensor a = Tensor::normal({64, 16, 32}, 0, 1, g), b = Tensor::normal({64, 32, 16}, 0, 1, g);
  auto [one, two] = with_1_and_2_threads([&] { return matmul(a, b); });
  CHECK(max_abs_diff(one, two) < 1e-5);
}

// ---- graceful under a competing load (core/parallel.h, TeamPolicy) ----------------

namespace {
constexpr int64_t kUs = 1000, kMs = 1000 * kUs;

// Benches the calling thread's team for good (until set_num_threads), as a
// stall under a competing load would for a while: a synthetic 100 ms stall (a
// whole window) fed to a policy whose bench lasts 1000 s, so a slow test
// machine cannot outlast it. (A warm-up region goes first: the first region is
// never judged.)
void bench_team() {
  TeamPolicy::Params p;
  p.solo_min_ns = p.solo_max_ns = int64_t{1000} * 1000 * kMs;
  qkv::detail::calling_thread_policy() = TeamPolicy(p);
  qkv::detail::calling_thread_policy().record(10 * kUs, 1 * kUs, qkv::detail::now_ns());
  qkv::detail::calling_thread_policy().record(10 * kUs, 100 * kMs, qkv::detail::now_ns());
}
}  // namespace

// Regions back to back for a TeamPolicy: each starts where the last one ended.
struct Regions {
  TeamPolicy& p;
  int64_t now;
  bool operator()(int64_t busy, int64_t wait) {
    now += busy + wait;
    return p.record(busy, wait, now);
  }
  // Regions of `busy` work and `wait` waiting until one benches the team
  // (at most `limit`); returns how many ran.
  int until_bench(int64_t busy, int64_t wait, int limit = 100000) {
    for (int i = 1; i <= limit; ++i)
      if ((*this)(busy, wait)) return i;
    return limit + 1;
  }
};

TEST_CASE("TeamPolicy keeps the team while its regions wait little, and through a single stall") {
  TeamPolicy p;
  Regions region{p, 0};
  // 10,000 regions of 50 us work with 2 us of waiting (the fork and the join).
  bool always = true;
  for (int i = 0; i < 10000; ++i) {
    always = always && p.use_team(region.now);
    region(50 * kUs, 2 * kUs);
  }
  CHECK(always);
  // One region that lost 8 ms (a virtual machine's other vCPU taken away for a
  // moment; a first step's page faults) among regions that work: not a load.
  region(5 * kUs, 8 * kMs);
  for (int i = 0; i < 2000; ++i) region(50 * kUs, 2 * kUs);
  CHECK(p.use_team(region.now));
  // A big region whose other thread lost a 3 ms time slice still gained.
  region(50 * kMs, 3 * kMs);
  CHECK(p.use_team(region.now));
}

TEST_CASE(
    "TeamPolicy benches the team after a window that waited more than it worked, four times longer "
    "after each failed try") {
  TeamPolicy p;
  const TeamPolicy::Params d;
  Regions region{p, 1000 * kMs};
  CHECK_FALSE(region(50 * kUs, 2 * kUs));  // the first region is cold: never judged
  // Regions of 50 us that each wait 3 ms for a descheduled thread: benched
  // when they fill a window (17 x 3.05 ms >= 50 ms).
  CHECK(region.until_bench(50 * kUs, 3 * kMs) == 17);
  CHECK_FALSE(p.use_team(region.now));
  CHECK_FALSE(p.use_team(region.now + d.solo_min_ns - 1));
  CHECK(p.use_team(region.now + d.solo_min_ns));
  // The load persists: every try stalls again. The first region of a try
  // follows the bench's idle gap (its threads slept): it is not judged, however
  // long it waited; the window after it is.
  int64_t bench = d.solo_min_ns;
  for (int tries = 0; tries < 8; ++tries) {
    region.now = p.solo_until();
    CHECK(p.use_team(region.now));
    CHECK_FALSE(region(50 * kUs, 8 * kMs));  // waking the threads
    CHECK(p.use_team(region.now));
    CHECK(region.until_bench(50 * kUs, 3 * kMs) == 17);
    bench = std::min(4 * bench, d.solo_max_ns);
    CHECK(p.solo_until() == region.now + bench);
    CHECK_FALSE(p.use_team(region.now + bench - 1));
  }
  CHECK(bench == d.solo_max_ns);
  // The load is gone: a clean window of regions brings the shortest bench back.
  region.now = p.solo_until();
  region(95 * kUs, 5 * kUs);  // cold
  for (int64_t t = 0; t < d.window_ns; t += 100 * kUs) region(95 * kUs, 5 * kUs);
  CHECK(p.use_team(region.now));
  CHECK(p.next_solo_ns() == d.solo_min_ns);
  CHECK(region.until_bench(10 * kUs, 1 * kMs) < 100);
  CHECK(p.solo_until() == region.now + d.solo_min_ns);
}

TEST_CASE("TeamPolicy does not judge a region whose threads were asleep (after an idle gap)") {
  const TeamPolicy::Params d;
  TeamPolicy p;
  Regions region{p, 0};
  region(50 * kUs, 2 * kUs);
  // Idle a little (threads still spinning or just asleep): judged.
  region.now += d.cold_gap_ns;
  CHECK(region(50 * kUs, 60 * kMs));
  // Idle longer than cold_gap_ns: waking the threads took 60 ms; not a stall.
  TeamPolicy q;
  Regions other{q, 0};
  other(50 * kUs, 2 * kUs);
  other.now += d.cold_gap_ns + 1;
  CHECK_FALSE(other(50 * kUs, 60 * kMs));
  CHECK(q.use_team(other.now));
}

TEST_CASE("TeamPolicy adds up small waits: many regions each waiting longer than they work") {
  TeamPolicy p;
  Regions region{p, 0};
  region(40 * kUs, 60 * kUs);  // cold
  // Each region works 40 us and waits 60 us: no single one is a stall, but
  // over a window (500 x 100 us = 50 ms) the team was slower than one thread.
  CHECK(region.until_bench(40 * kUs, 60 * kUs) == 500);
  CHECK_FALSE(p.use_team(region.now));
}

TEST_CASE("a benched team: parallel_for runs the same chunks, in turn, on the calling thread") {
  ThreadScope ts(2);
  const int64_t n = 3 * kBig + 7;
  auto chunks = [&] {
    std::vector<std::tuple<int64_t, int64_t, int>> got;  // (begin, end, slot)
    std::set<std::thread::id> ids;
    std::vector<int> hits(static_cast<size_t>(n), 0);
    const ThreadSlots slots;
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
#pragma omp critical(test_chunks)
      {
        got.emplace_back(b, e, slots.slot());
        ids.insert(std::this_thread::get_id());
      }
    });
    std::sort(got.begin(), got.end());
    bool once = true;
    for (int h : hits) once = once && h == 1;
    return std::make_tuple(got, ids.size(), once);
  };
  const auto [team, team_threads, team_once] = chunks();
  bench_team();
  CHECK_FALSE(plan_team().team);
  const auto [alone, alone_threads, alone_once] = chunks();
  CHECK(team_once);
  CHECK(alone_once);
  CHECK(team.size() == 2);
  CHECK(alone == team);       // same (begin, end, slot) chunks
  CHECK(alone_threads == 1);  // all on the calling thread
  set_num_threads(2);         // resets the policy
  CHECK(plan_team().team);
}

TEST_CASE(
    "run_parts in turn acts as a region: nested calls run on the caller, slots are the parts") {
  ThreadScope ts(2);
  std::vector<int> slot_of_part(2, -1), nested_calls(2, 0);
  std::vector<bool> inside(2, false);
  run_parts(TeamPlan{2, false}, [&](int t, int n) {
    CHECK(n == 2);
    slot_of_part[t] = ThreadSlots().slot();  // made inside: nested, one row
    inside[t] = in_parallel_region();
    parallel_for(kBig, [&](int64_t b, int64_t e) {
      nested_calls[t]++;
      CHECK(b == 0);
      CHECK(e == kBig);
    });
  });
  CHECK(slot_of_part == std::vector<int>{0, 0});
  CHECK(inside == std::vector<bool>{true, true});
  CHECK(nested_calls == std::vector<int>{1, 1});
  CHECK_FALSE(in_parallel_region());  // and it is over afterwards
  // A ThreadSlots made before the parts sees each part's own slot.
  const ThreadSlots slots;
  std::vector<int> seen;
  run_parts(TeamPlan{2, false}, [&](int, int) { seen.push_back(slots.slot()); });
  CHECK(seen == std::vector<int>{0, 1});
}

TEST_CASE("per-slot partial sums are bitwise the same whether the team runs or is benched") {
  ThreadScope ts(2);
  Generator g = test_generator();
  const Tensor x = Tensor::normal({kBig}, 0, 1, g);
  auto slot_sums = [&] {
    const ThreadSlots slots;
    std::vector<float> fpartial(static_cast<size_t>(slots.count()), 0.0f);
    parallel_for(kBig, [&](int64_t b, int64_t e) {
      float s = 0;
      for (int64_t i = b; i < e; ++i) s += x.data()[i];
      fpartial[slots.slot()] += s;
    });
    return fpartial[0] + fpartial[1];
  };
  const float team = slot_sums();
  bench_team();
  CHECK_FALSE(plan_team().team);
  const float alone = slot_sums();
  CHECK(team == alone);
}

TEST_CASE("set_adaptive_threads(false) keeps the team whatever the timings") {
  ThreadScope ts(2);
  set_adaptive_threads(false);
  CHECK_FALSE(adaptive_threads());
  qkv::detail::team_record(10 * kUs, 50 * kMs);
  CHECK(plan_team().team);
  set_adaptive_threads(true);
  CHECK(adaptive_threads());
  CHECK(plan_team().team);
  const TeamStats s0 = team_stats();
  qkv::detail::team_record(10 * kUs, 1 * kUs);  // the first region: cold, not judged
  CHECK(plan_team().team);
  qkv::detail::team_record(10 * kUs, 50 * kMs);
  CHECK_FALSE(plan_team().team);
  const TeamStats s1 = team_stats();
  CHECK(s1.team_regions == s0.team_regions + 2);
  CHECK(s1.benches == s0.benches + 1);
  CHECK(s1.benched_regions == s0.benched_regions + 1);  // the plan_team() just above
}
