// Cross-entropy in float32: parity with F.cross_entropy (fixtures ce and
// ce_plain in tests/fixtures/layers.safetensors), the errors it raises, and the
// same loss and gradient on 1 and 2 threads. The float64 gradient checks and
// the fused-vs-composed tests are in test_cross_entropy_grad.cpp.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "errors.h"
#include "fixture.h"
#include "nn/cross_entropy.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::check_close;
using qkv::testing::check_error;
using qkv::testing::ids_of;
using qkv::testing::test_generator;

namespace {

void ce_fixture_case(const std::string& c, int64_t ignore_index, real eps) {
  TensorFile f = load_fixture("layers.safetensors");
  Var logits(f.get(c + ".in.logits").clone(), true);
  Var loss = nn::cross_entropy(logits, ids_of(f.get(c + ".in.targets")), ignore_index, eps);
  check_close(loss.data().reshape({1}), f.get(c + ".out.loss"), c + " out.loss");
  loss.backward();
  check_close(logits.grad(), f.get(c + ".grad.logits"), c + " grad.logits");
}

}  // namespace

TEST_CASE(
    "cross_entropy with ignore_index 0 and smoothing 0.2 matches F.cross_entropy (fixture ce)") {
  ce_fixture_case("ce", 0, 0.2);
}

TEST_CASE("cross_entropy without smoothing or ignores matches F.cross_entropy (fixture ce_plain)") {
  ce_fixture_case("ce_plain", -100, 0);
}

TEST_CASE("cross_entropy rejects a target outside [0, V), naming the op, the index and V") {
  Var logits(Tensor::zeros({3, 5}), true);
  check_error(
      [&] {
        nn::cross_entropy(logits, {1, 7, 2});
      },
      {"cross_entropy", "target 7", "index 1", "V = 5"});
  check_error(
      [&] {
        nn::cross_entropy(logits, {1, 2, -1});
      },
      {"cross_entropy", "target -1", "index 2", "V = 5"});
  check_error(
      [&] {
        nn::cross_entropy(logits, {5, 0, 0}, /*ignore_index=*/0);
      },
      {"cross_entropy", "target 5", "index 0", "V = 5"});
}

TEST_CASE("cross_entropy rejects a wrong number of targets, 1-D logits and bad smoothing") {
  check_error(
      [] {
        nn::cross_entropy(Var(Tensor::zeros({2, 3, 5})), {1, 2, 3});
      },
      {"cross_entropy", "(2,3,5)", "6 rows", "3 targets"});
  check_error([] { nn::cross_entropy(Var(Tensor::zeros({5})), {1}); }, {"cross_entropy", "(5)"});
  check_error(
      [] {
        nn::cross_entropy(Var(Tensor::zeros({2, 5})), {1, 2}, -100, 1.5);
      },
      {"cross_entropy", "label_smoothing", "1.5"});
}

TEST_CASE(
    "cross_entropy gives the same loss and gradient on 1 and 2 threads (rows split across "
    "threads)") {
  const int prev = get_num_threads();
  Generator g = test_generator();
  const int64_t N = 600, V = 80;  // N*V above the parallel grain
  Tensor logits = Tensor::normal({N, V}, 0, 2, g);
  std::vector<int64_t> tg(N);
  for (int64_t i = 0; i < N; ++i) tg[i] = i % 7 == 0 ? -100 : g.randint(0, V);
  struct Out {
    Tensor loss, dl;
  };
  auto run = [&](int threads) {
    set_num_threads(threads);
    Var vl(logits.clone(), true);
    Var loss = nn::cross_entropy(vl, tg, -100, 0.1);
    loss.backward();
    return Out{loss.data(), vl.grad()};
  };
  Out one = run(1), two = run(2);
  set_num_threads(prev);
  CHECK(one.loss.item() == two.loss.item());  // per-row losses summed in row order
  CHECK(max_abs_diff(one.dl, two.dl) == 0);
}
