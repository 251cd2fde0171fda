// Threading: results must not depend on the thread count (bitwise for
// elementwise kernels, to rounding for sums), and bad counts are rejected.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/qkv_core.h"

using namespace qkv;

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
bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (a.data()[i] != b.data()[i]) return false;
  return true;
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
  parallel_for(10, [&](int64_t b, int64_t e) { calls++; CHECK(b == 0); CHECK(e == 10); });
  CHECK(calls == 1);
  parallel_for(0, [&](int64_t, int64_t) { calls++; });
  CHECK(calls == 1);
}

TEST_CASE("large elementwise ops give bitwise identical results with 1 and 2 threads") {
  Generator g(1);
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
      {"add broadcast (1024,1024)+(1024)", [&] { return add(a.reshape({1024, 1024}), row); }},
      {"gelu_backward", [&] { return gelu_backward(b, a); }},
      {"fill_", [&] { return Tensor::empty({kBig}).fill_(real(0.25)); }},
      {"add_", [&] { return a.clone().add_(b, real(0.5)); }},
      {"permute", [&] { return permute(a.reshape({64, 128, 128}), {2, 0, 1}); }},
      {"softmax rows", [&] { return softmax(a.reshape({4096, 256})); }}};
  for (const auto& [name, f] : ops) {
    INFO(name);
    auto [one, two] = with_1_and_2_threads(f);
    CHECK(bitwise_equal(one, two));
  }
}

TEST_CASE("large sums agree with 1 and 2 threads within 1e-5 relative") {
  Generator g(2);
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
  Generator g(3);
  const Tensor a = Tensor::normal({64, 16, 32}, 0, 1, g), b = Tensor::normal({64, 32, 16}, 0, 1, g);
  auto [one, two] = with_1_and_2_threads([&] { return matmul(a, b); });
  CHECK(max_abs_diff(one, two) < 1e-5);
}
