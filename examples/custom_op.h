// A differentiable op written outside the library: RMSNorm (Zhang & Sennrich,
// 2019), the normalisation of LLaMA-style Transformers. It uses only the
// public headers, exactly as a user's own program would, and shows the whole
// contract of autograd/node.h in one place:
//
//   1. the maths, forward and backward, on paper;
//   2. a forward kernel and a backward kernel on plain arrays (no graph);
//   3. a Node subclass: what it saves, its backward, release_saved;
//   4. the function users call: check the inputs, run the forward kernel,
//      save what backward needs, make_node + make_result.
//
// examples/custom_op.cpp gradchecks it and trains a small model with it;
// tests/test_custom_op_grad.cpp gradchecks it in float64 and compares it with
// the same maths composed from primitive ops.
//
// The library has this op as a layer of its own (nn::rms_norm and the module
// nn::RMSNorm, nn/rmsnorm.h, which `--norm rms` uses). custom::rms_norm is
// the example's own copy, kept to be read beside it line by line (its r is
// the library's rrms); tests/test_rmsnorm_grad.cpp checks that the two give
// the same outputs and gradients.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "autograd/node.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/tensor.h"

namespace custom {

using qkv::real;

// ---- 1. The maths -------------------------------------------------------------
// x (..., D) is normalised over its last axis, one row of D numbers at a time
// (N rows = the product of the leading dims), and scaled by gamma (D):
//
//   r      = 1 / sqrt(mean_j(x_j^2) + eps)        one number per row ("rstd")
//   xhat_j = x_j * r
//   y_j    = xhat_j * gamma_j
//
// Unlike LayerNorm there is no mean subtraction and no bias. Backward, given
// g = dL/dy (..., D):
//
//   dgamma_j = sum over rows of g_j * xhat_j
//   dxhat_j  = g_j * gamma_j
//   dx_j     = r * (dxhat_j - xhat_j * mean_i(dxhat_i * xhat_i))
//
// The last line, derived: dr/dx_j = -r^3 x_j / D, so
//   dx_j = sum_i dxhat_i dxhat_i/dx_j = r dxhat_j + sum_i dxhat_i x_i (-r^3 x_j / D)
//        = r (dxhat_j - xhat_j * mean_i(dxhat_i xhat_i)).
//
// What backward needs: x, gamma and r. xhat is cheap to recompute from x and
// r, so it is not saved (an (N, D) tensor less held until backward).

// ---- 2. Kernels: numbers only --------------------------------------------------
// Rows are independent, so the loops over rows may run on several threads:
// parallel_for (core/parallel.h) splits [0, N) into one chunk per thread once
// the tensor is at least one parallel grain big, and runs the lambda on the
// calling thread otherwise. The lambda must not throw.
inline int64_t row_grain(int64_t D) {
  return std::max<int64_t>(1, qkv::kParallelGrain / std::max<int64_t>(D, 1));
}

// x (N, D), gamma (D) -> y (N, D), rstd (N).
inline void rms_norm_forward(const real* x, const real* gamma, int64_t N, int64_t D, real eps,
                             real* y, real* rstd) {
  qkv::parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const real* xr = x + r * D;
          real sq = 0;
          for (int64_t j = 0; j < D; ++j) sq += xr[j] * xr[j];
          const real rs = real(1) / std::sqrt(sq / static_cast<real>(D) + eps);
          rstd[r] = rs;
          for (int64_t j = 0; j < D; ++j) y[r * D + j] = xr[j] * rs * gamma[j];
        }
      },
      row_grain(D));
}

// g (N, D) = dL/dy, and the saved x (N, D), gamma (D), rstd (N) ->
// dx (N, D) and dgamma (D). Either output may be null: not wanted.
inline void rms_norm_backward(const real* g, const real* x, const real* gamma, const real* rstd,
                              int64_t N, int64_t D, real* dx, real* dgamma) {
  if (dx) {
    qkv::parallel_for(
        N,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const real* gr = g + r * D;
            const real* xr = x + r * D;
            const real rs = rstd[r];
            real m = 0;  // mean_i(dxhat_i * xhat_i) over this row
            for (int64_t j = 0; j < D; ++j) m += gr[j] * gamma[j] * xr[j] * rs;
            m /= static_cast<real>(D);
            // dx_j = r * (dxhat_j - xhat_j * m)
            for (int64_t j = 0; j < D; ++j)
              dx[r * D + j] = rs * (gr[j] * gamma[j] - xr[j] * rs * m);
          }
        },
        row_grain(D));
  }
  if (dgamma) {
    // dgamma_j = sum_r g_rj * xhat_rj: a column sum, kept serial (and so in a
    // fixed order: the same result on any number of threads).
    for (int64_t j = 0; j < D; ++j) dgamma[j] = 0;
    for (int64_t r = 0; r < N; ++r)
      for (int64_t j = 0; j < D; ++j) dgamma[j] += g[r * D + j] * x[r * D + j] * rstd[r];
  }
}

// ---- 3. The node: what the graph records ------------------------------------------
// One RMSNormNode per call. Its inputs, in order, are (x, gamma): backward
// returns their gradients in that order. It saves Tensors, not Vars: the
// graph does not keep an intermediate Var's values alive (autograd/var.h), so
// x may be the output of an earlier op whose values are freed by the time
// backward runs; a saved Tensor shares x's storage and keeps it.
struct RMSNormNode : qkv::Node {
  qkv::Tensor x;      // (..., D) the input as given
  qkv::Tensor gamma;  // (D)
  qkv::Tensor rstd;   // (N) one r per row, computed by forward

  const char* name() const override { return "rms_norm"; }
  qkv::OpDoc doc() const override {
    return {"y = x * r * gamma,  r = 1/sqrt(mean(x^2) + eps)",
            "dx = r * (dxg - xhat * mean(dxg * xhat)),  dxg = dy * gamma,  xhat = x * r",
            "docs/custom-ops.md"};
  }

  // grad_out has the output's shape (..., D); the engine checked it. Return
  // one gradient per input, each of its input's shape; an input that does
  // not need one (needs_grad(i) false: a constant, or a frozen parameter)
  // gets an undefined Tensor() and costs nothing.
  qkv::TensorList backward(const qkv::Tensor& g) override {
    const int64_t D = gamma.numel(), N = x.numel() / D;
    qkv::Tensor dx = needs_grad(0) ? qkv::Tensor::empty(x.shape()) : qkv::Tensor();
    qkv::Tensor dgamma = needs_grad(1) ? qkv::Tensor::empty(gamma.shape()) : qkv::Tensor();
    rms_norm_backward(g.data(), x.data(), gamma.data(), rstd.data(), N, D,
                      dx.defined() ? dx.data() : nullptr,
                      dgamma.defined() ? dgamma.data() : nullptr);
    return {dx, dgamma};
  }

  // After backward (unless retain_graph) the engine calls this: drop the
  // saved tensors so their memory returns while the rest of backward runs.
  void release_saved() override { x = gamma = rstd = qkv::Tensor(); }
};

// ---- 4. The function users call ---------------------------------------------------
// x (..., D), gamma (D) -> (..., D). Bad shapes throw qkv::Error naming the
// op and the shapes, before any work.
inline qkv::Var rms_norm(const qkv::Var& x, const qkv::Var& gamma, real eps = real(1e-6)) {
  const qkv::Tensor& X = x.data();
  const qkv::Tensor& G = gamma.data();
  if (X.dim() < 1 || X.size(-1) == 0)
    throw qkv::Error("rms_norm: input " + qkv::to_string(X.shape()) +
                     " needs a non-empty last dimension D");
  const int64_t D = X.size(-1), N = X.numel() / D;
  if (G.shape() != qkv::Shape{D})
    throw qkv::Error("rms_norm: input " + qkv::to_string(X.shape()) + " needs gamma of shape (" +
                     std::to_string(D) + "), got " + qkv::to_string(G.shape()));
  if (!(eps > 0)) throw qkv::Error("rms_norm: eps must be > 0, got " + std::to_string(eps));

  qkv::Tensor Y = qkv::Tensor::empty(X.shape());  // (..., D)
  qkv::Tensor R = qkv::Tensor::empty({N});        // (N)
  rms_norm_forward(X.data(), G.data(), N, D, eps, Y.data(), R.data());

  // Record. make_node gives a node from the graph's pool; make_result wraps Y
  // in a Var and, only if grad mode is on and x or gamma requires grad, sets
  // the node's inputs and makes it Y's grad_fn. Otherwise the node (and what
  // it saved) is simply dropped.
  auto node = qkv::make_node<RMSNormNode>();
  node->x = X;  // shares storage: no copy
  node->gamma = G;
  node->rstd = R;
  return qkv::make_result(Y, node, {x, gamma});
}

}  // namespace custom
