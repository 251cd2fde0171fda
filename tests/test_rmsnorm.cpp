// RMSNorm in float32: parity with PyTorch (fixture rmsnorm.safetensors, made
// from plain torch ops in float64: PyTorch 1.13 has no RMSNorm module), the
// errors it raises, and the same numbers on 1 and 2 threads. The float64
// gradient checks are in test_rmsnorm_grad.cpp.
#include <doctest/doctest.h>

#include <string>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "errors.h"
#include "fixture.h"
#include "nn/rmsnorm.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::check_close;
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_generator;

TEST_CASE(
    "RMSNorm matches PyTorch composed in float64: output and grads of x, weight (fixture rms)") {
  TensorFile f = load_fixture("rmsnorm.safetensors");
  nn::RMSNorm norm(8);
  load_params(norm, f, "rms.");
  Var x(f.get("rms.in.x").clone(), true);
  Var y = norm(x);
  check_close(y.data(), f.get("rms.out.y"), "rms out.y");
  y.backward(f.get("rms.in.upstream"));
  check_close(x.grad(), f.get("rms.grad.x"), "rms grad.x");
  check_close(norm.weight.grad(), f.get("rms.grad.weight"), "rms grad.weight");
}

TEST_CASE("add_rms_norm matches PyTorch composed in float64: output and grads of a, b, weight") {
  TensorFile f = load_fixture("rmsnorm.safetensors");
  nn::RMSNorm norm(8);
  load_params(norm, f, "add_rms.");
  Var a(f.get("add_rms.in.a").clone(), true), b(f.get("add_rms.in.b").clone(), true);
  Var y = norm(a, b);
  check_close(y.data(), f.get("add_rms.out.y"), "add_rms out.y");
  y.backward(f.get("add_rms.in.upstream"));
  check_close(a.grad(), f.get("add_rms.grad.a"), "add_rms grad.a");
  check_close(b.grad(), f.get("add_rms.grad.b"), "add_rms grad.b");
  check_close(norm.weight.grad(), f.get("add_rms.grad.weight"), "add_rms grad.weight");
}

TEST_CASE("rms_norm rejects a gamma that does not match the last dim, and eps <= 0, naming both") {
  Var x(Tensor::zeros({2, 3, 4}));
  std::string msg = error_of([&] { nn::rms_norm(x, Var(Tensor::ones({3}))); });
  CHECK(has(msg, "rms_norm"));
  CHECK(has(msg, "(2,3,4)"));
  CHECK(has(msg, "(3)"));
  msg = error_of([&] { nn::rms_norm(x, Var(Tensor::ones({4})), 0); });
  CHECK(has(msg, "eps must be > 0"));
  msg = error_of([&] { nn::add_rms_norm(x, Var(Tensor::zeros({2, 4})), Var(Tensor::ones({4}))); });
  CHECK(has(msg, "add_rms_norm"));
  CHECK(has(msg, "(2,4)"));
  CHECK(has(error_of([] { nn::RMSNorm bad(0); }), "RMSNorm: D must be positive"));
}

TEST_CASE("rms_norm of a row of zeros is zero, not NaN (eps keeps rrms finite)") {
  Var x(Tensor::zeros({2, 5}), true), gamma(Tensor::ones({5}), true);
  Var y = nn::rms_norm(x, gamma);
  sum(y).backward();
  for (int64_t i = 0; i < 10; ++i) {
    CHECK(y.data().data()[i] == 0);
    CHECK(std::isfinite(x.grad().data()[i]));
  }
}

TEST_CASE("rms_norm gives the same results on 1 and 2 threads (rows split across threads)") {
  const int prev = get_num_threads();
  Generator g = test_generator();
  const Tensor x0 = Tensor::normal({4000, 16}, 0, 1, g), up = Tensor::normal({4000, 16}, 0, 1, g);
  const Tensor g0 = Tensor::normal({16}, 1, 0.5, g);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Var x(x0.clone(), true), gamma(g0.clone(), true);
    Var y = nn::rms_norm(x, gamma);
    y.backward(up);
    return std::vector<Tensor>{y.data(), x.grad(), gamma.grad()};
  };
  const auto one = run(1), two = run(2);
  set_num_threads(prev);
  check_close(two[0], one[0], "y");  // rows are independent: bit for bit in practice
  check_close(two[1], one[1], "grad x");
  check_close(two[2], one[2], "grad gamma");  // summed in another order: rounding only
}
