// By hand: a matrix of doubles and the plain loops the formulas of the
// step-through need (examples/step_through.h), in double and written from
// the formulas alone: no qkv kernel is called, so a wrong kernel in the
// library shows as a gap between these numbers and the engine's.
//
// Names as in docs/symbols.md: Z scores, P probabilities (softmax of each row
// of Z), dA = dL/dA, rowsum(A) = the sum over the last axis (one number per row).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace qkv::step {

// ============================================================================
// By hand: a matrix of doubles and the plain loops the formulas need
// ============================================================================

// A row-major (rows, cols) matrix of doubles; M(i, j) is row i, column j.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> a;
  Mat() = default;
  Mat(int64_t r, int64_t c) : rows(r), cols(c), a(static_cast<size_t>(r * c), 0.0) {}
  double& operator()(int64_t i, int64_t j) { return a[static_cast<size_t>(i * cols + j)]; }
  double operator()(int64_t i, int64_t j) const { return a[static_cast<size_t>(i * cols + j)]; }
};

// A tensor's numbers as a Mat: its last dimension across, the rest down.
inline Mat to_mat(const Tensor& t) {
  const int64_t cols = t.dim() == 0 ? 1 : t.size(-1);
  Mat m(t.numel() / cols, cols);
  for (int64_t i = 0; i < t.numel(); ++i) m.a[static_cast<size_t>(i)] = t.data()[i];
  return m;
}

// And back: a Mat's numbers as a (rows, cols) tensor (rounded to qkv::real).
inline Tensor tensor_of(const Mat& m) {
  Tensor t = Tensor::zeros({m.rows, m.cols});
  for (size_t i = 0; i < m.a.size(); ++i) t.data()[i] = static_cast<real>(m.a[i]);
  return t;
}

// max |a - b|, and the same relative to b's size: max |a - b| / max |b|.
inline double max_gap(const Mat& a, const Mat& b) {
  if (a.rows != b.rows || a.cols != b.cols) throw Error("max_gap: the two differ in shape");
  double gap = 0;
  for (size_t i = 0; i < a.a.size(); ++i) gap = std::max(gap, std::fabs(a.a[i] - b.a[i]));
  return gap;
}

inline double relative_gap(const Mat& a, const Mat& b) {
  double size = 0;
  for (double v : b.a) size = std::max(size, std::fabs(v));
  return size > 0 ? max_gap(a, b) / size : max_gap(a, b);
}

namespace hand {

// C = A B: C(i,j) = sum_k A(i,k) B(k,j).   (n,m) x (m,p) -> (n,p)
inline Mat matmul(const Mat& A, const Mat& B) {
  Mat C(A.rows, B.cols);
  for (int64_t i = 0; i < A.rows; ++i)
    for (int64_t j = 0; j < B.cols; ++j)
      for (int64_t k = 0; k < A.cols; ++k) C(i, j) += A(i, k) * B(k, j);
  return C;
}

inline Mat transpose(const Mat& A) {
  Mat T(A.cols, A.rows);
  for (int64_t i = 0; i < A.rows; ++i)
    for (int64_t j = 0; j < A.cols; ++j) T(j, i) = A(i, j);
  return T;
}

inline Mat scaled(Mat A, double s) {
  for (double& v : A.a) v *= s;
  return A;
}

inline Mat plus(Mat A, const Mat& B) {
  for (size_t i = 0; i < A.a.size(); ++i) A.a[i] += B.a[i];
  return A;
}

// Y = X W^T + b, a linear layer (W stored (out, in), as in qkv and PyTorch).
inline Mat linear(const Mat& X, const Mat& W, const Mat& b) {
  Mat Y = matmul(X, transpose(W));  // (N,in) x (in,out) -> (N,out)
  for (int64_t i = 0; i < Y.rows; ++i)
    for (int64_t j = 0; j < Y.cols; ++j) Y(i, j) += b(0, j);
  return Y;
}

// Columns [c0, c0 + n) of A: one head's block.
inline Mat columns(const Mat& A, int64_t c0, int64_t n) {
  Mat B(A.rows, n);
  for (int64_t i = 0; i < A.rows; ++i)
    for (int64_t j = 0; j < n; ++j) B(i, j) = A(i, c0 + j);
  return B;
}

inline void set_columns(Mat& A, int64_t c0, const Mat& B) {
  for (int64_t i = 0; i < B.rows; ++i)
    for (int64_t j = 0; j < B.cols; ++j) A(i, c0 + j) = B(i, j);
}

// P = softmax of each row of Z: P(i,j) = exp(Z(i,j)) / sum_k exp(Z(i,k)).
// (The row's largest Z is subtracted first; it cancels, and exp cannot overflow.)
inline Mat softmax(const Mat& Z) {
  Mat P(Z.rows, Z.cols);
  for (int64_t i = 0; i < Z.rows; ++i) {
    double top = Z(i, 0), sum = 0;
    for (int64_t j = 0; j < Z.cols; ++j) top = std::max(top, Z(i, j));
    for (int64_t j = 0; j < Z.cols; ++j) sum += P(i, j) = std::exp(Z(i, j) - top);
    for (int64_t j = 0; j < Z.cols; ++j) P(i, j) /= sum;
  }
  return P;
}

// rowsum(A): the sum over the last axis, one number per row. (n,m) -> (n,1)
inline Mat rowsum(const Mat& A) {
  Mat r(A.rows, 1);
  for (int64_t i = 0; i < A.rows; ++i)
    for (int64_t j = 0; j < A.cols; ++j) r(i, 0) += A(i, j);
  return r;
}

// The softmax backward, row by row: dZ = P * (dP - rowsum(dP * P)), * elementwise.
// (From dP_j/dZ_i = P_j (delta_ij - P_i); docs/attention-backward.md, step 3.)
inline Mat softmax_backward(const Mat& P, const Mat& dP) {
  Mat dPP(P.rows, P.cols);
  for (size_t i = 0; i < P.a.size(); ++i) dPP.a[i] = dP.a[i] * P.a[i];
  const Mat r = rowsum(dPP);  // (n,1)
  Mat dZ(P.rows, P.cols);
  for (int64_t i = 0; i < P.rows; ++i)
    for (int64_t j = 0; j < P.cols; ++j) dZ(i, j) = P(i, j) * (dP(i, j) - r(i, 0));
  return dZ;
}

// LayerNorm, forward and backward, on N rows of D, from the saved input x:
//   mean = mean(x),  var = mean((x - mean)^2),  rstd = 1 / sqrt(var + eps)   per row
//   xhat = (x - mean) * rstd,  y = xhat * gamma + beta
// Given dy (N, D):
//   dxhat  = dy * gamma
//   dx     = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
//   dgamma = colsum(dy * xhat),  dbeta = colsum(dy)
// (Derivation: docs/layernorm-backward.md.)
struct LayerNorm {
  Mat mean, rstd;                   // (N,1)
  Mat xhat, y;                      // (N,D)
  Mat dxhat;                        // (N,D)
  Mat mean_dxhat, mean_dxhat_xhat;  // (N,1)
  Mat dx;                           // (N,D)
  Mat dgamma, dbeta;                // (1,D)
};

inline LayerNorm layer_norm(const Mat& x, const Mat& dy, const Mat& gamma, const Mat& beta,
                            double eps) {
  const int64_t N = x.rows, D = x.cols;
  LayerNorm f;
  f.mean = f.rstd = f.mean_dxhat = f.mean_dxhat_xhat = Mat(N, 1);
  f.xhat = f.y = f.dxhat = f.dx = Mat(N, D);
  f.dgamma = f.dbeta = Mat(1, D);
  for (int64_t i = 0; i < N; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < D; ++j) mean += x(i, j) / D;
    for (int64_t j = 0; j < D; ++j) var += (x(i, j) - mean) * (x(i, j) - mean) / D;
    const double rstd = 1 / std::sqrt(var + eps);
    double a = 0, b = 0;  // mean(dxhat), mean(dxhat * xhat)
    for (int64_t j = 0; j < D; ++j) {
      f.xhat(i, j) = (x(i, j) - mean) * rstd;
      f.y(i, j) = f.xhat(i, j) * gamma(0, j) + beta(0, j);
      f.dxhat(i, j) = dy(i, j) * gamma(0, j);
      a += f.dxhat(i, j) / D;
      b += f.dxhat(i, j) * f.xhat(i, j) / D;
      f.dgamma(0, j) += dy(i, j) * f.xhat(i, j);
      f.dbeta(0, j) += dy(i, j);
    }
    for (int64_t j = 0; j < D; ++j) f.dx(i, j) = rstd * (f.dxhat(i, j) - a - f.xhat(i, j) * b);
    f.mean(i, 0) = mean;
    f.rstd(i, 0) = rstd;
    f.mean_dxhat(i, 0) = a;
    f.mean_dxhat_xhat(i, 0) = b;
  }
  return f;
}

// RMSNorm, forward and backward, on N rows of D, from the saved input x
// (docs/rmsnorm-backward.md): LayerNorm without the mean and the shift,
//   rrms = 1 / sqrt(mean(x^2) + eps)   per row
//   xhat = x * rrms,  y = xhat * gamma
// Given dy (N, D):
//   dxhat  = dy * gamma
//   dx     = rrms * (dxhat - xhat * mean(dxhat * xhat))
//   dgamma = colsum(dy * xhat)
struct RMSNorm {
  Mat rrms;                // (N,1)
  Mat xhat, y, dxhat, dx;  // (N,D)
  Mat mean_dxhat_xhat;     // (N,1)
  Mat dgamma;              // (1,D)
};

inline RMSNorm rms_norm(const Mat& x, const Mat& dy, const Mat& gamma, double eps) {
  const int64_t N = x.rows, D = x.cols;
  RMSNorm f;
  f.rrms = f.mean_dxhat_xhat = Mat(N, 1);
  f.xhat = f.y = f.dxhat = f.dx = Mat(N, D);
  f.dgamma = Mat(1, D);
  for (int64_t i = 0; i < N; ++i) {
    double ms = 0;  // mean(x^2)
    for (int64_t j = 0; j < D; ++j) ms += x(i, j) * x(i, j) / D;
    const double rrms = 1 / std::sqrt(ms + eps);
    double b = 0;  // mean(dxhat * xhat)
    for (int64_t j = 0; j < D; ++j) {
      f.xhat(i, j) = x(i, j) * rrms;
      f.y(i, j) = f.xhat(i, j) * gamma(0, j);
      f.dxhat(i, j) = dy(i, j) * gamma(0, j);
      b += f.dxhat(i, j) * f.xhat(i, j) / D;
      f.dgamma(0, j) += dy(i, j) * f.xhat(i, j);
    }
    for (int64_t j = 0; j < D; ++j) f.dx(i, j) = rrms * (f.dxhat(i, j) - f.xhat(i, j) * b);
    f.rrms(i, 0) = rrms;
    f.mean_dxhat_xhat(i, 0) = b;
  }
  return f;
}

// RoPE on one pair (x0, x1) of a head, turned by the angle a = t * theta_i
// (position t, pair i, theta_i = base^(-2i / d_k); docs/rope-backward.md):
//   y0 = x0 cos a - x1 sin a,  y1 = x0 sin a + x1 cos a     (a rotation R(a))
// Its backward is the transposed rotation R(-a), given (dy0, dy1):
//   dx0 = dy0 cos a + dy1 sin a,  dx1 = -dy0 sin a + dy1 cos a
struct RopePair {
  Mat y, dx;  // (1,2) each
};

inline RopePair rope_pair(const Mat& x, const Mat& dy, double a) {
  const double c = std::cos(a), s = std::sin(a);
  RopePair r;
  r.y = r.dx = Mat(1, 2);
  r.y(0, 0) = x(0, 0) * c - x(0, 1) * s;
  r.y(0, 1) = x(0, 0) * s + x(0, 1) * c;
  r.dx(0, 0) = dy(0, 0) * c + dy(0, 1) * s;
  r.dx(0, 1) = -dy(0, 0) * s + dy(0, 1) * c;
  return r;
}

// Central differences of a scalar function F of a matrix, one element at a time:
//   dF/dx_i ~ (F(x + h e_i) - F(x - h e_i)) / 2h.
// In double, h = 1e-6 leaves ~1e-10 of error (h^2 from truncation, 1e-16 / h
// from rounding).
inline constexpr double kFdStep = 1e-6;

inline Mat central_difference(const std::function<double(const Mat&)>& F, Mat x,
                              double h = kFdStep) {
  Mat g(x.rows, x.cols);
  for (size_t i = 0; i < x.a.size(); ++i) {
    const double orig = x.a[i];
    x.a[i] = orig + h;
    const double up = F(x);
    x.a[i] = orig - h;
    const double down = F(x);
    x.a[i] = orig;
    g.a[i] = (up - down) / (2 * h);
  }
  return g;
}

}  // namespace hand

}  // namespace qkv::step
