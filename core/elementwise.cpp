#include "core/elementwise.h"

#include <cmath>
#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"

namespace qkv {
namespace {

// out[i] = f(a[i]) over contiguous memory: a plain loop the compiler vectorises.
template <class F>
Tensor map_unary(const Tensor& a, const char* op, F f) {
  check_defined(a, op);
  Tensor out = Tensor::empty(a.shape());
  const real* __restrict x = a.data();
  real* __restrict y = out.data();
  parallel_for(a.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
  return out;
}

// out[i] = f(a[i], b[i]) for same-shape tensors.
template <class F>
Tensor map_same(const Tensor& a, const Tensor& b, const char* op, F f) {
  check_defined(a, op);
  check_defined(b, op);
  if (a.shape() != b.shape())
    throw Error(std::string(op) + ": shapes " + to_string(a.shape()) + " and " +
                to_string(b.shape()) + " differ");
  Tensor out = Tensor::empty(a.shape());
  const real* __restrict x = a.data();
  const real* __restrict z = b.data();
  real* __restrict y = out.data();
  parallel_for(a.numel(), [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) y[i] = f(x[i], z[i]);
  });
  return out;
}

// Broadcasting binary op. The output is walked row by row (last dimension
// innermost); within a row each operand advances by 1 or, when broadcast along
// that dimension, by 0, so the inner loop stays simple.
template <class F>
Tensor map_broadcast(const Tensor& a, const Tensor& b, const char* op, F f) {
  check_defined(a, op);
  check_defined(b, op);
  if (a.shape() == b.shape()) return map_same(a, b, op, f);
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(out_shape);
  const int64_t n = out.numel();
  if (n == 0) return out;
  const real* __restrict x = a.data();
  const real* __restrict z = b.data();
  real* __restrict y = out.data();
  if (b.numel() == 1) {
    const real s = z[0];
    parallel_for(n, [&](int64_t s0, int64_t e) {
      for (int64_t i = s0; i < e; ++i) y[i] = f(x[i], s);
    });
    return out;
  }
  if (a.numel() == 1) {
    const real s = x[0];
    parallel_for(n, [&](int64_t s0, int64_t e) {
      for (int64_t i = s0; i < e; ++i) y[i] = f(s, z[i]);
    });
    return out;
  }
  const int r = static_cast<int>(out_shape.size());
  // Strides of a and b in the output's index space: 0 where broadcast.
  // (Shapes hold them: inline, no heap block per call.)
  Shape sa(r, 0), sb(r, 0);
  {
    const auto st_a = strides_of(a.shape()), st_b = strides_of(b.shape());
    const int oa = r - a.dim(), ob = r - b.dim();
    for (int d = 0; d < r; ++d) {
      if (d >= oa && a.shape()[d - oa] != 1) sa[d] = st_a[d - oa];
      if (d >= ob && b.shape()[d - ob] != 1) sb[d] = st_b[d - ob];
    }
  }
  const int64_t inner = out_shape[r - 1];
  const int64_t rows = n / inner;
  const int64_t ia = sa[r - 1], ib = sb[r - 1];
  parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t row = r0; row < r1; ++row) {
          // Offsets of this row's start in a and b.
          int64_t rem = row, oa = 0, ob = 0;
          for (int d = r - 2; d >= 0; --d) {
            const int64_t idx = rem % out_shape[d];
            rem /= out_shape[d];
            oa += idx * sa[d];
            ob += idx * sb[d];
          }
          const real* xa = x + oa;
          const real* xb = z + ob;
          real* yr = y + row * inner;
          if (ia == 1 && ib == 1) {
            for (int64_t i = 0; i < inner; ++i) yr[i] = f(xa[i], xb[i]);
          } else if (ia == 1) {
            const real v = xb[0];
            for (int64_t i = 0; i < inner; ++i) yr[i] = f(xa[i], v);
          } else if (ib == 1) {
            const real v = xa[0];
            for (int64_t i = 0; i < inner; ++i) yr[i] = f(v, xb[i]);
          } else {
            const real v = f(xa[0], xb[0]);
            for (int64_t i = 0; i < inner; ++i) yr[i] = v;
          }
        }
      },
      std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)));
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return map_broadcast(a, b, "add", [](real x, real y) { return x + y; });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return map_broadcast(a, b, "sub", [](real x, real y) { return x - y; });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return map_broadcast(a, b, "mul", [](real x, real y) { return x * y; });
}
Tensor div(const Tensor& a, const Tensor& b) {
  return map_broadcast(a, b, "div", [](real x, real y) { return x / y; });
}

Tensor add(const Tensor& a, real s) {
  return map_unary(a, "add", [s](real x) { return x + s; });
}
Tensor sub(const Tensor& a, real s) {
  return map_unary(a, "sub", [s](real x) { return x - s; });
}
Tensor rsub(real s, const Tensor& a) {
  return map_unary(a, "rsub", [s](real x) { return s - x; });
}
Tensor mul(const Tensor& a, real s) {
  return map_unary(a, "mul", [s](real x) { return x * s; });
}
Tensor div(const Tensor& a, real s) {
  return map_unary(a, "div", [s](real x) { return x / s; });
}
Tensor rdiv(real s, const Tensor& a) {
  return map_unary(a, "rdiv", [s](real x) { return s / x; });
}

Tensor neg(const Tensor& a) {
  return map_unary(a, "neg", [](real x) { return -x; });
}
Tensor exp(const Tensor& a) {
  return map_unary(a, "exp", [](real x) { return fast_exp(x); });
}
Tensor log(const Tensor& a) {
  return map_unary(a, "log", [](real x) { return std::log(x); });
}
Tensor sqrt(const Tensor& a) {
  return map_unary(a, "sqrt", [](real x) { return std::sqrt(x); });
}
Tensor pow(const Tensor& a, real p) {
  return map_unary(a, "pow", [p](real x) { return std::pow(x, p); });
}
Tensor relu(const Tensor& a) {
  return map_unary(a, "relu", [](real x) { return x > 0 ? x : real(0); });
}
Tensor gelu(const Tensor& a) { return map_unary(a, "gelu", gelu_scalar); }
Tensor tanh(const Tensor& a) {
  return map_unary(a, "tanh", [](real x) { return std::tanh(x); });
}
Tensor sigmoid(const Tensor& a) {
  return map_unary(a, "sigmoid", [](real x) { return real(1) / (real(1) + std::exp(-x)); });
}

Tensor relu_backward(const Tensor& g, const Tensor& x) {
  return map_same(g, x, "relu_backward", [](real gi, real xi) { return xi > 0 ? gi : real(0); });
}
Tensor gelu_backward(const Tensor& g, const Tensor& x) {
  return map_same(g, x, "gelu_backward",
                  [](real gi, real xi) { return gi * gelu_grad_scalar(xi); });
}
Tensor tanh_backward(const Tensor& g, const Tensor& y) {
  return map_same(g, y, "tanh_backward", [](real gi, real yi) { return gi * (real(1) - yi * yi); });
}
Tensor sigmoid_backward(const Tensor& g, const Tensor& y) {
  return map_same(g, y, "sigmoid_backward",
                  [](real gi, real yi) { return gi * yi * (real(1) - yi); });
}
Tensor pow_backward(const Tensor& g, const Tensor& x, real p) {
  return map_same(g, x, "pow_backward",
                  [p](real gi, real xi) { return gi * p * std::pow(xi, p - real(1)); });
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  check_defined(g, "sum_to");
  if (g.shape() == shape) return g;
  // Validate: `shape` must broadcast to g's shape.
  if (broadcast_shapes(g.shape(), shape, "sum_to") != g.shape())
    throw Error("sum_to: cannot reduce " + to_string(g.shape()) + " to " + to_string(shape));
  Tensor out = Tensor::zeros(shape);
  const int r = g.dim();
  const int off = r - static_cast<int>(shape.size());
  const auto st_out = strides_of(shape);
  Shape so(r, 0);  // output strides in g's index space (0 where summed); inline
  for (int d = off; d < r; ++d)
    if (shape[d - off] != 1) so[d] = st_out[d - off];
  const real* __restrict x = g.data();
  real* __restrict y = out.data();
  const Shape& gs = g.shape();
  const int64_t inner = r ? gs[r - 1] : 1;
  const int64_t rows = g.numel() / std::max<int64_t>(inner, 1);
  // Common case: shape is a suffix of g's shape (bias-like): sum over leading
  // rows; threads split the columns so no two write the same output.
  bool suffix = true;
  for (int d = off; d < r; ++d)
    if (shape[d - off] != gs[d]) suffix = false;
  if (suffix) {
    const int64_t cols = out.numel(), nrows = g.numel() / std::max<int64_t>(cols, 1);
    parallel_for(
        cols,
        [&](int64_t c0, int64_t c1) {
          for (int64_t rr = 0; rr < nrows; ++rr)
            for (int64_t c = c0; c < c1; ++c) y[c] += x[rr * cols + c];
        },
        std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(nrows, 1)));
    return out;
  }
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rem = row, oo = 0;
    for (int d = r - 2; d >= 0; --d) {
      oo += (rem % gs[d]) * so[d];
      rem /= gs[d];
    }
    const real* xr = x + row * inner;
    if (so[r - 1] == 1) {
      for (int64_t i = 0; i < inner; ++i) y[oo + i] += xr[i];
    } else {
      real s = 0;
      for (int64_t i = 0; i < inner; ++i) s += xr[i];
      y[oo] += s;
    }
  }
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  check_defined(a, "max_abs_diff");
  check_defined(b, "max_abs_diff");
  if (a.shape() != b.shape())
    throw Error("max_abs_diff: shapes " + to_string(a.shape()) + " and " + to_string(b.shape()) +
                " differ");
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(a.data()[i]) - b.data()[i]);
    if (std::isnan(d)) return d;  // NaN propagates (a later finite d must not hide it)
    if (d > m) m = d;
  }
  return m;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data()[i], y = b.data()[i];
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) return false;
  }
  return true;
}

}  // namespace qkv
