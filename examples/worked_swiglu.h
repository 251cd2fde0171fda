// SwiGLU, worked (examples/worked_example.cpp, docs/swiglu-backward.md): one
// row x of D = 2 through a block of hidden width F = 2, with weights written
// below; L = sum(y). The engine is the fused nn::swiglu; by hand, plain loops
// in double with sigmoid written out; finite differences of the by-hand forward.
#pragma once
#include <cmath>

#include "autograd/ops.h"
#include "examples/by_hand.h"
#include "nn/swiglu.h"

namespace qkv::step {

struct SwiGLUExample {
  Mat x, Wg, Wu, Wd;  // (1,2); (F,D) = (2,2), (2,2); (D,F) = (2,2)
};

inline SwiGLUExample swiglu_example() {
  SwiGLUExample ex{Mat(1, 2), Mat(2, 2), Mat(2, 2), Mat(2, 2)};
  ex.x.a = {1, -1};
  ex.Wg.a = {1, 0.5, -1, 2};
  ex.Wu.a = {2, 1, 1, -1};
  ex.Wd.a = {1, 0, 0.5, -1};
  return ex;
}

// The engine: y = swiglu(x, Wg, Wu, Wd), then sum(y).backward().
struct SwiGLUPass {
  Mat y, dx;  // (1,2) each
};

inline SwiGLUPass swiglu_pass(const SwiGLUExample& ex) {
  Var x(tensor_of(ex.x), true);
  Var y = nn::swiglu(x, Var(tensor_of(ex.Wg), false), Var(tensor_of(ex.Wu), false),
                     Var(tensor_of(ex.Wd), false));
  sum(y).backward();
  return {to_mat(y.data()), to_mat(x.grad())};
}

// By hand, every piece of the row:
//   a = x Wg^T, u = x Wu^T            the gate and up projections (1,F)
//   s = sigmoid(a), silu(a) = a s,    h = silu(a) * u,   y = h Wd^T
// Backward from dy = 1 (L = sum(y)):
//   dh = dy Wd,  da = dh * u * silu'(a),  silu'(a) = s (1 + a (1 - s)),
//   du = dh * silu(a),  dx = da Wg + du Wu
struct SwiGLUByHand {
  Mat a, u, s, silu, dsilu, h, y, dh, da, du, dx;
};

inline SwiGLUByHand swiglu_by_hand(const SwiGLUExample& ex) {
  SwiGLUByHand r;
  r.a = hand::matmul(ex.x, hand::transpose(ex.Wg));
  r.u = hand::matmul(ex.x, hand::transpose(ex.Wu));
  r.s = r.silu = r.dsilu = r.h = Mat(1, r.a.cols);
  for (int64_t f = 0; f < r.a.cols; ++f) {
    const double a = r.a(0, f), s = 1 / (1 + std::exp(-a));
    r.s(0, f) = s;
    r.silu(0, f) = a * s;
    r.dsilu(0, f) = s * (1 + a * (1 - s));
    r.h(0, f) = a * s * r.u(0, f);
  }
  r.y = hand::matmul(r.h, hand::transpose(ex.Wd));
  Mat dy(1, r.y.cols);
  for (double& v : dy.a) v = 1;
  r.dh = hand::matmul(dy, ex.Wd);
  r.da = r.du = Mat(1, r.a.cols);
  for (int64_t f = 0; f < r.a.cols; ++f) {
    r.da(0, f) = r.dh(0, f) * r.u(0, f) * r.dsilu(0, f);
    r.du(0, f) = r.dh(0, f) * r.silu(0, f);
  }
  r.dx = hand::plus(hand::matmul(r.da, ex.Wg), hand::matmul(r.du, ex.Wu));
  return r;
}

inline Mat swiglu_fd(const SwiGLUExample& ex) {
  return hand::central_difference(
      [&](const Mat& x) {
        SwiGLUExample e = ex;
        e.x = x;
        const Mat y = swiglu_by_hand(e).y;
        return y.a[0] + y.a[1];
      },
      ex.x);
}

}  // namespace qkv::step
