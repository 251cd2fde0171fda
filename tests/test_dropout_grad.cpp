// Dropout in float64: once its mask is drawn, dropout is x times a constant,
// so its backward (dx = dy * m) is checked against finite differences with
// the mask held fixed (the generator re-seeded on every evaluation), and
// against the same product composed from primitive ops.
#include <doctest/doctest.h>

#include "autograd/qkv_autograd.h"
#include "nn/dropout.h"
#include "test_seed.h"

using namespace qkv;

TEST_CASE("dropout backward (dx = dy * m, the mask held fixed) matches finite differences") {
  Generator g = testing::test_generator();
  Var x(Tensor::normal({3, 7}, 0, 1, g), true);
  const uint64_t mask_seed = testing::test_seed() + 17;
  for (const real p : {real(0.25), real(0.5)}) {
    CAPTURE(p);
    auto f = [&](const std::vector<Var>& in) {
      Generator drop(mask_seed);  // the same mask at every evaluation
      return nn::dropout(in[0], p, drop);
    };
    const GradcheckResult r = gradcheck(f, {x});
    CHECK_MESSAGE(r.ok, r);
    CHECK(r.checked == 21);
  }
}

TEST_CASE("dropout equals x times its mask composed from ops, and so does its gradient") {
  Generator g = testing::test_generator();
  const Tensor x0 = Tensor::normal({4, 5}, 0, 1, g);
  const real p = 0.4;
  Generator d1(99);
  Var x(x0.clone(), true);
  Var y = nn::dropout(x, p, d1);
  // The mask m read off the output: m = y / x (0 or 1/(1-p)), then x * m composed.
  Tensor m = Tensor::zeros(x0.shape());
  int64_t kept = 0;
  for (int64_t i = 0; i < x0.numel(); ++i) {
    const real yi = y.data().data()[i], xi = x0.data()[i];
    if (yi != 0) {
      m.data()[i] = yi / xi;
      CHECK(m.data()[i] == doctest::Approx(1 / (1 - p)).epsilon(1e-12));
      ++kept;
    }
  }
  CHECK(kept > 0);
  CHECK(kept < x0.numel());
  Var xc(x0.clone(), true);
  Var yc = mul(xc, Var(m));
  Generator gr(7);
  const Tensor dy = Tensor::normal(x0.shape(), 0, 1, gr);
  y.backward(dy);
  yc.backward(dy);
  for (int64_t i = 0; i < x0.numel(); ++i) {
    CHECK(y.data().data()[i] == doctest::Approx(yc.data().data()[i]).epsilon(1e-12));
    CHECK(x.grad().data()[i] == doctest::Approx(xc.grad().data()[i]).epsilon(1e-12));
  }
}
