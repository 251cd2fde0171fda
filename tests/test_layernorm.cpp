// LayerNorm in float32: parity with torch.nn.LayerNorm (fixture ln in
// tests/fixtures/layers.safetensors), the errors it raises, and accuracy on
// rows far from zero. The float64 gradient checks are in test_layernorm_grad.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "errors.h"
#include "fixture.h"
#include "nn/layernorm.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::check_close;
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_generator;

TEST_CASE(
    "LayerNorm matches torch.nn.LayerNorm: output and grads of x, weight, bias (fixture ln)") {
  TensorFile f = load_fixture("layers.safetensors");
  nn::LayerNorm ln(8);
  load_params(ln, f, "ln.");
  Var x(f.get("ln.in.x").clone(), true);
  Var y = ln(x);
  check_close(y.data(), f.get("ln.out.y"), "ln out.y");
  y.backward(f.get("ln.in.upstream"));
  check_close(x.grad(), f.get("ln.grad.x"), "ln grad.x");
  check_close(ln.weight.grad(), f.get("ln.grad.weight"), "ln grad.weight");
  check_close(ln.bias.grad(), f.get("ln.grad.bias"), "ln grad.bias");
}

TEST_CASE("layer_norm rejects gamma/beta that do not match the last dim, naming the shapes") {
  Var x(Tensor::zeros({2, 3, 4}));
  std::string msg =
      error_of([&] { nn::layer_norm(x, Var(Tensor::ones({3})), Var(Tensor::zeros({4}))); });
  INFO("message: " << msg);
  CHECK(has(msg, "layer_norm"));
  CHECK(has(msg, "(2,3,4)"));
  CHECK(has(msg, "(3)"));
  msg = error_of([&] { nn::layer_norm(x, Var(Tensor::ones({4})), Var(Tensor::zeros({2, 4}))); });
  CHECK(has(msg, "layer_norm"));
  CHECK(has(msg, "(2,4)"));
  nn::LayerNorm ln(5);
  msg = error_of([&] { ln(x); });
  CHECK(has(msg, "layer_norm"));
  CHECK(has(msg, "(2,3,4)"));
  CHECK(has(msg, "(5)"));
  msg = error_of([] { nn::LayerNorm bad(0); });
  CHECK(has(msg, "LayerNorm"));
  CHECK(has(msg, "0"));
}

TEST_CASE("layer_norm in float32 is accurate on rows far from zero (mean 1000, sd 1)") {
  Generator g = test_generator();
  const int64_t N = 8, D = 64;
  Tensor x = add(Tensor::normal({N, D}, 0, 1, g), real(1000));
  Var y = nn::layer_norm(Var(x), Var(Tensor::ones({D})), Var(Tensor::zeros({D})));
  double worst = 0;
  for (int64_t r = 0; r < N; ++r) {  // reference in double, two passes
    double m = 0, v = 0;
    for (int64_t j = 0; j < D; ++j) m += x.at({r, j});
    m /= D;
    for (int64_t j = 0; j < D; ++j) v += (x.at({r, j}) - m) * (x.at({r, j}) - m);
    const double rs = 1 / std::sqrt(v / D + 1e-5);
    for (int64_t j = 0; j < D; ++j)
      worst = std::max(worst, std::abs(y.data().at({r, j}) - (x.at({r, j}) - m) * rs));
  }
  // float32 stores x to ~6e-5 at 1000; E[x^2] - E[x]^2 in float would be off by ~10%
  CHECK(worst < 2e-4);
}

TEST_CASE("layer_norm gives the same results on 1 and 2 threads (rows split across threads)") {
  const int prev = get_num_threads();
  Generator g = test_generator();
  const int64_t N = 600, D = 96;  // N*D above the parallel grain
  // dgamma and dbeta are column sums compared with a relative tolerance, so
  // their terms must not cancel (a sum near 0 of terms ~1 keeps their ~1e-5
  // rounding, which no relative tolerance covers): up > 0, and every column of
  // x is offset by +-3, which gives its xhat the same sign in almost every row.
  Tensor x = Tensor::normal({N, D}, 0, 1, g), gam = Tensor::normal({D}, 1, 0.3, g),
         bet = Tensor::normal({D}, 0, 0.3, g), up = Tensor::uniform({N, D}, 0.5, 1.5, g);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) x.data()[n * D + d] += d % 2 ? 3 : -3;
  struct Out {
    Tensor y, dx, dg, db;
  };
  auto run = [&](int threads) {
    set_num_threads(threads);
    Var vx(x.clone(), true), vg(gam.clone(), true), vb(bet.clone(), true);
    Var y = nn::layer_norm(vx, vg, vb);
    y.backward(up);
    return Out{y.data(), vx.grad(), vg.grad(), vb.grad()};
  };
  Out one = run(1), two = run(2);
  set_num_threads(prev);
  CHECK(max_abs_diff(one.y, two.y) == 0);  // rows are independent
  CHECK(max_abs_diff(one.dx, two.dx) == 0);
  CHECK(allclose(one.dg, two.dg, 1e-5, 1e-5));  // column sums: only the order of adds differs
  CHECK(allclose(one.db, two.db, 1e-5, 1e-5));
}
