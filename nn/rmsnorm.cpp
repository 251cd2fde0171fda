// RMSNorm, read top to bottom (the same order as nn/layernorm.cpp):
//   1. the maths: forward, and the derivation of the backward
//   2. rmsnorm_forward    the forward kernel over N rows of D: y, rrms
//   3. rmsnorm_backward   the backward kernel: dx, dgamma
//   4. RMSNormNode        the autograd adapter around the two kernels
//   5. rms_norm           the public op
//   6. add_rms_norm       the Post-LN residual fusion norm(a + b), same kernels
//   7. nn::RMSNorm        the module holding gamma
// docs/rmsnorm-backward.md walks through the same derivation.
#include "nn/rmsnorm.h"

#include <cmath>
#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/thread_scratch.h"

namespace qkv::nn {

// ============================================================================
// 1. The maths
// ============================================================================
// The input x (..., D) is read as N rows of D (N = product of the leading
// dims); every row is scaled on its own. For one row:
//   ms   = sum_j x_j^2 / D                     the mean square
//   rrms = 1 / sqrt(ms + eps)                  the inverse root mean square
//   xhat = x * rrms                            unit root mean square
//   y    = gamma * xhat                        gamma (D) shared by all rows
// Unlike LayerNorm nothing is subtracted (the row keeps its mean) and there
// is no shift beta.
//
// Backward, given dy = dL/dy (N, D):
//   dgamma = sum over rows of dy * xhat
//   dxhat  = dy * gamma
//   dx     = rrms * (dxhat - xhat * mean(dxhat * xhat))     (the mean over the row)
// The last line: rrms depends on every x of the row. With
// d(ms)/dx_i = 2 x_i / D,
//   d(rrms)/dx_i   = -(1/2) (ms + eps)^(-3/2) * 2 x_i / D = -rrms^3 x_i / D = -rrms^2 xhat_i / D
//   d(xhat_j)/dx_i = delta_ij rrms + x_j d(rrms)/dx_i = rrms * (delta_ij - xhat_j xhat_i / D)
// and dx_i = sum_j dxhat_j d(xhat_j)/dx_i is the line above. Read it as
// LayerNorm's rule without its "- mean(dxhat)" term: y is blind to scaling
// the row (the component of the gradient along xhat is removed), but not to
// shifting it.
//
// What backward needs is x, gamma and per row rrms (N): xhat is recomputed
// from x as it is read, which saves an (N, D) buffer.

// ============================================================================
// 2. Forward kernel
// ============================================================================

namespace {
// One row: xr (D) -> yr (D), and the row's rrms.
inline void rmsnorm_forward_row(const real* __restrict xr, const real* __restrict gamma, int64_t D,
                                real eps, real* __restrict yr, real* rrms) {
  // The mean square in double: a sum of D squares, all positive, so no
  // cancellation, but float32 would lose the last bits of a long row.
  double s2 = 0;
#pragma omp simd reduction(+ : s2)
  for (int64_t j = 0; j < D; ++j) s2 += static_cast<double>(xr[j]) * xr[j];
  const real s = static_cast<real>(1.0 / std::sqrt(s2 / D + eps));  // rrms
  *rrms = s;
  // y = xhat * gamma, xhat = x * rrms
#pragma omp simd
  for (int64_t j = 0; j < D; ++j) yr[j] = xr[j] * s * gamma[j];
}
}  // namespace

void rmsnorm_forward(real* y, real* rrms, const real* x, const real* gamma, int64_t N, int64_t D,
                     real eps) {
  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          rmsnorm_forward_row(x + r * D, gamma, D, eps, y + r * D, rrms + r);
      },
      grain_for(D));
}

// ============================================================================
// 3. Backward kernel
// ============================================================================

void rmsnorm_backward(real* dx, real* dgamma, const real* dy_, const real* x_, const real* gamma_,
                      const real* rrms_, int64_t N, int64_t D) {
  const real* __restrict dy = dy_;        // (N, D)
  const real* __restrict x = x_;          // (N, D)
  const real* __restrict gamma = gamma_;  // (D)
  const real* __restrict rrms = rrms_;    // (N)
  const bool want_dx = dx != nullptr;
  // dgamma is a sum over all rows: each thread adds its rows into its own (D)
  // block, and the blocks are added in thread order at the end.
  ThreadSums dgamma_parts(dgamma ? D : 0);
  const real invD = real(1) / static_cast<real>(D);

  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        real* __restrict dg = dgamma_parts.mine();  // (D), this thread's share of dgamma
        for (int64_t r = r0; r < r1; ++r) {
          const real* __restrict xr = x + r * D;    // (D)
          const real* __restrict dyr = dy + r * D;  // (D)
          const real s = rrms[r];
          // One pass for the parameter sum and the row sum behind mean(dxhat * xhat).
          real sum_dxhat_xhat = 0;
          if (dgamma) {
#pragma omp simd reduction(+ : sum_dxhat_xhat)
            for (int64_t j = 0; j < D; ++j) {
              const real xh = xr[j] * s;  // xhat = x * rrms
              dg[j] += dyr[j] * xh;       // dgamma += dy * xhat
              sum_dxhat_xhat += dyr[j] * gamma[j] * xh;
            }
          } else {
#pragma omp simd reduction(+ : sum_dxhat_xhat)
            for (int64_t j = 0; j < D; ++j) sum_dxhat_xhat += dyr[j] * gamma[j] * xr[j] * s;
          }
          if (!want_dx) continue;
          const real mean_dxhat_xhat = sum_dxhat_xhat * invD;
          real* __restrict dxr = dx + r * D;  // (D)
                                              // dx = rrms * (dxhat - xhat * mean(dxhat * xhat))
#pragma omp simd
          for (int64_t j = 0; j < D; ++j)
            dxr[j] = s * (dyr[j] * gamma[j] - xr[j] * s * mean_dxhat_xhat);
        }
      },
      grain_for(D));
  if (dgamma) dgamma_parts.sum_into(dgamma);
}

// ============================================================================
// 4. The autograd adapter
// ============================================================================

namespace {
// What backward reads: x (N, D), the rows that were scaled; gamma (D); rrms
// (N). backward() runs rmsnorm_backward into fresh tensors for the
// gradients asked for (undefined for the others).
struct RMSNormSaved {
  Tensor x, gamma, rrms;

  struct Grads {
    Tensor dx, dgamma;
  };
  Grads backward(const Tensor& dy, bool want_dx, bool want_dgamma) const {
    const int64_t D = gamma.numel(), N = x.numel() / D;
    Grads g;
    if (want_dx) g.dx = Tensor::empty(x.shape());  // (..., D)
    if (want_dgamma) g.dgamma = Tensor::empty({D});
    auto ptr = [](Tensor& t) { return t.defined() ? t.data() : nullptr; };
    rmsnorm_backward(ptr(g.dx), ptr(g.dgamma), dy.data(), x.data(), gamma.data(), rrms.data(), N,
                     D);
    return g;
  }
  void release() { x = gamma = rrms = Tensor(); }
};

// Inputs (x, gamma).
struct RMSNormNode : Node {
  RMSNormSaved saved;
  const char* name() const override { return "rms_norm"; }
  OpDoc doc() const override {
    return {"y = xhat * gamma,  xhat = x * rrms,  rrms = 1/sqrt(mean(x^2) + eps)",
            "dx = rrms * (dxhat - xhat * mean(dxhat * xhat)),  dxhat = dy * gamma",
            "docs/rmsnorm-backward.md#backward-step-by-step"};
  }
  TensorList backward(const Tensor& dy) override {
    RMSNormSaved::Grads g = saved.backward(dy, needs_grad(0), needs_grad(1));
    return {g.dx, g.dgamma};
  }
  void release_saved() override { saved.release(); }
};

// The checks shared by rms_norm and add_rms_norm; `op` names the public
// function in the message. Returns D.
int64_t check_rms_norm_args(const char* op, const Tensor& x, const Tensor& gamma, real eps) {
  if (x.dim() < 1)
    throw Error(std::string(op) + ": input " + to_string(x.shape()) +
                " must have a last dimension D");
  const int64_t D = x.size(-1);
  if (gamma.shape() != Shape{D})
    throw Error(std::string(op) + ": input " + to_string(x.shape()) + " needs gamma of shape (" +
                std::to_string(D) + "), got " + to_string(gamma.shape()));
  if (D == 0)
    throw Error(std::string(op) + ": input " + to_string(x.shape()) + " has an empty last dim");
  // eps > 0: a row of zeros would otherwise give rrms = inf and y = NaN.
  if (!(eps > 0)) throw Error(std::string(op) + ": eps must be > 0, got " + std::to_string(eps));
  return D;
}
}  // namespace

// ============================================================================
// 5. The public op
// ============================================================================

Var rms_norm(const Var& x, const Var& gamma, real eps) {
  const Tensor& X = x.data();      // (..., D), N rows
  const Tensor& G = gamma.data();  // (D)
  const int64_t D = check_rms_norm_args("rms_norm", X, G, eps);
  const int64_t N = X.numel() / D;
  Tensor Y = Tensor::empty(X.shape());  // (..., D)
  Tensor rrms = Tensor::empty({N});     // (N)
  rmsnorm_forward(Y.data(), rrms.data(), X.data(), G.data(), N, D, eps);

  auto node = make_node<RMSNormNode>();
  node->saved = {X, G, rrms};  // X is the input itself: no copy
  return make_result(Y, node, {x, gamma});
}

// ============================================================================
// 6. The Post-LN residual fusion: add_rms_norm(a, b) = rms_norm(a + b)
// ============================================================================
// As add_layer_norm (nn/layernorm.cpp section 6): each row's sum is made just
// before the row is scaled, while a and b are in L1 cache, and the sum is
// kept because backward needs the scaled rows x = a + b. Both addends get the
// same dx, since d(a + b)/da = d(a + b)/db = 1.

namespace {
// x (N, D) = a + b, and rmsnorm_forward of it, row by row. a, b (N, D).
void add_rmsnorm_forward(real* y, real* x, real* rrms, const real* a_, const real* b_,
                         const real* gamma, int64_t N, int64_t D, real eps) {
  const real* __restrict a = a_;
  const real* __restrict b = b_;
  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          real* __restrict xr = x + r * D;        // (D)
          const real* __restrict ar = a + r * D;  // (D)
          const real* __restrict br = b + r * D;  // (D)
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) xr[j] = ar[j] + br[j];
          rmsnorm_forward_row(xr, gamma, D, eps, y + r * D, rrms + r);
        }
      },
      grain_for(D));
}

// Inputs (a, b, gamma); saved.x holds the sum a + b.
struct AddRMSNormNode : Node {
  RMSNormSaved saved;
  const char* name() const override { return "add_rms_norm"; }
  OpDoc doc() const override {
    return {"y = rms_norm(a + b)  (the residual sum and RMSNorm in one pass)",
            "da = db = dx of rms_norm = rrms * (dxhat - xhat * mean(dxhat * xhat))",
            "docs/rmsnorm-backward.md#backward-step-by-step"};
  }
  TensorList backward(const Tensor& dy) override {
    RMSNormSaved::Grads g = saved.backward(dy, needs_grad(0) || needs_grad(1), needs_grad(2));
    return {needs_grad(0) ? g.dx : Tensor(), needs_grad(1) ? g.dx : Tensor(), g.dgamma};
  }
  void release_saved() override { saved.release(); }
};
}  // namespace

Var add_rms_norm(const Var& a, const Var& b, const Var& gamma, real eps) {
  const Tensor& A = a.data();      // (..., D), N rows
  const Tensor& Bs = b.data();     // (..., D)
  const Tensor& G = gamma.data();  // (D)
  if (Bs.shape() != A.shape())
    throw Error("add_rms_norm: addends " + to_string(A.shape()) + " and " + to_string(Bs.shape()) +
                " must have the same shape");
  const int64_t D = check_rms_norm_args("add_rms_norm", A, G, eps);
  const int64_t N = A.numel() / D;
  Tensor X = Tensor::empty(A.shape());  // (..., D): a + b
  Tensor Y = Tensor::empty(A.shape());  // (..., D)
  Tensor rrms = Tensor::empty({N});     // (N)
  add_rmsnorm_forward(Y.data(), X.data(), rrms.data(), A.data(), Bs.data(), G.data(), N, D, eps);

  auto node = make_node<AddRMSNormNode>();
  node->saved = {X, G, rrms};
  return make_result(Y, node, {a, b, gamma});
}

// ============================================================================
// 7. The module
// ============================================================================

RMSNorm::RMSNorm(int64_t D_, real eps_) : Norm(D_, eps_) {
  if (D <= 0) throw Error("RMSNorm: D must be positive, got " + std::to_string(D));
  if (!(eps > 0)) throw Error("RMSNorm: eps must be > 0, got " + std::to_string(eps));
  weight = register_parameter("weight", Tensor::ones({D}));
}

}  // namespace qkv::nn
