// LayerNorm, read top to bottom:
//   1. the maths: forward, and the derivation of the backward
//   2. layernorm_forward    the forward kernel over N rows of D: y, mean, rstd
//   3. layernorm_backward   the backward kernel: dx, dgamma, dbeta
//   4. LayerNormNode        the autograd adapter around the two kernels
//   5. layer_norm           the public op
//   6. add_layer_norm       the Post-LN residual fusion norm(a + b), same kernels
//   7. nn::LayerNorm        the module holding gamma and beta
// docs/layernorm-backward.md walks through the same derivation with numbers.
#include "nn/layernorm.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/reduce.h"
#include "core/thread_scratch.h"

namespace qkv::nn {

// ============================================================================
// 1. The maths
// ============================================================================
// The input x (..., D) is read as N rows of D (N = product of the leading
// dims); every row is normalised on its own. For one row:
//   mean = sum_j x_j / D
//   var  = sum_j (x_j - mean)^2 / D            biased, as in PyTorch
//   rstd = 1 / sqrt(var + eps)
//   xhat = (x - mean) * rstd                   zero mean, unit variance
//   y    = gamma * xhat + beta                 gamma, beta (D) shared by all rows
//
// Backward, given dy = dL/dy (N, D):
//   dbeta  = sum over rows of dy               (y moves one for one with beta)
//   dgamma = sum over rows of dy * xhat
//   dxhat  = dy * gamma
//   dx     = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))   (means over the row)
// The last line is the only hard one, because mean and rstd depend on every x
// of the row. With d(mean)/dx_i = 1/D and d(var)/dx_i = 2 (x_i - mean) / D,
//   d(rstd)/dx_i    = -rstd^3 (x_i - mean) / D = -rstd^2 xhat_i / D
//   d(xhat_j)/dx_i  = rstd * (delta_ij - 1/D - xhat_j xhat_i / D)
// and dx_i = sum_j dxhat_j d(xhat_j)/dx_i is the line above. Read it as: take
// the gradient that reached xhat, remove its mean (y is blind to shifting the
// row), remove its component along xhat (blind to scaling it), scale by rstd.
//
// What backward needs is x, gamma and per row mean and rstd (N each): xhat is
// recomputed from x as it is read, which saves an (N, D) buffer.

// ============================================================================
// 2. Forward kernel
// ============================================================================

namespace {
// One row: xr (D) -> yr (D), and the row's mean and rstd.
inline void layernorm_forward_row(const real* __restrict xr, const real* __restrict gamma,
                                  const real* __restrict beta, int64_t D, real eps,
                                  real* __restrict yr, real* mean, real* rstd) {
  // mean and var in one pass over the row, in double. Shifting by the row's
  // first element keeps sum(d^2) - sum(d)^2 / D from cancelling when the row
  // sits far from zero (var = E[d^2] - E[d]^2 with d = x - x0).
  const real shift = xr[0];
  double s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
  for (int64_t j = 0; j < D; ++j) {
    const double d = static_cast<double>(xr[j]) - shift;
    s1 += d;
    s2 += d * d;
  }
  const double md = s1 / D;
  const double var = std::max(0.0, s2 / D - md * md);
  const real m = static_cast<real>(shift + md);                  // mean
  const real s = static_cast<real>(1.0 / std::sqrt(var + eps));  // rstd
  *mean = m;
  *rstd = s;
  // y = xhat * gamma + beta, xhat = (x - mean) * rstd
#pragma omp simd
  for (int64_t j = 0; j < D; ++j) yr[j] = (xr[j] - m) * s * gamma[j] + beta[j];
}
}  // namespace

void layernorm_forward(real* y, real* mean, real* rstd, const real* x, const real* gamma,
                       const real* beta, int64_t N, int64_t D, real eps) {
  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          layernorm_forward_row(x + r * D, gamma, beta, D, eps, y + r * D, mean + r, rstd + r);
      },
      grain_for(D));
}

// ============================================================================
// 3. Backward kernel
// ============================================================================

void layernorm_backward(real* dx, real* dgamma, real* dbeta, const real* dy_, const real* x_,
                        const real* gamma_, const real* mean_, const real* rstd_, int64_t N,
                        int64_t D) {
  const real* __restrict dy = dy_;        // (N, D)
  const real* __restrict x = x_;          // (N, D)
  const real* __restrict gamma = gamma_;  // (D)
  const real* __restrict mean = mean_;    // (N)
  const real* __restrict rstd = rstd_;    // (N)
  const bool want_dx = dx != nullptr;
  const bool want_params = dgamma || dbeta;
  // dgamma and dbeta are sums over all rows: each thread adds its rows into
  // its own (D) block, and the blocks are added in thread order at the end.
  ThreadSums dgamma_parts(want_params ? D : 0), dbeta_parts(want_params ? D : 0);
  const real invD = real(1) / static_cast<real>(D);

  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        real* __restrict dg = dgamma_parts.mine();  // (D), this thread's share of dgamma
        real* __restrict db = dbeta_parts.mine();   // (D), this thread's share of dbeta
        for (int64_t r = r0; r < r1; ++r) {
          const real* __restrict xr = x + r * D;    // (D)
          const real* __restrict dyr = dy + r * D;  // (D)
          const real m = mean[r], s = rstd[r];
          // One pass for the parameter sums and the two row sums behind
          // mean(dxhat) and mean(dxhat * xhat).
          real sum_dxhat = 0, sum_dxhat_xhat = 0;
          if (want_params) {
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
            for (int64_t j = 0; j < D; ++j) {
              const real xh = (xr[j] - m) * s;     // xhat = (x - mean) * rstd
              dg[j] += dyr[j] * xh;                // dgamma += dy * xhat
              db[j] += dyr[j];                     // dbeta  += dy
              const real dxh = dyr[j] * gamma[j];  // dxhat = dy * gamma
              sum_dxhat += dxh;
              sum_dxhat_xhat += dxh * xh;
            }
          } else {
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
            for (int64_t j = 0; j < D; ++j) {
              const real dxh = dyr[j] * gamma[j];
              sum_dxhat += dxh;
              sum_dxhat_xhat += dxh * (xr[j] - m) * s;
            }
          }
          if (!want_dx) continue;
          const real mean_dxhat = sum_dxhat * invD;
          const real mean_dxhat_xhat = sum_dxhat_xhat * invD;
          real* __restrict dxr = dx + r * D;  // (D)
      // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
#pragma omp simd
          for (int64_t j = 0; j < D; ++j)
            dxr[j] = s * (dyr[j] * gamma[j] - mean_dxhat - (xr[j] - m) * s * mean_dxhat_xhat);
        }
      },
      grain_for(D));
  if (dgamma) dgamma_parts.sum_into(dgamma);
  if (dbeta) dbeta_parts.sum_into(dbeta);
}

// ============================================================================
// 4. The autograd adapter
// ============================================================================

namespace {
// What backward reads: x (N, D), the rows that were normalised; gamma (D);
// mean and rstd (N). backward() runs layernorm_backward into fresh tensors
// for the gradients asked for (undefined for the others).
struct LayerNormSaved {
  Tensor x, gamma, mean, rstd;

  struct Grads {
    Tensor dx, dgamma, dbeta;
  };
  Grads backward(const Tensor& dy, bool want_dx, bool want_dgamma, bool want_dbeta) const {
    const int64_t D = gamma.numel(), N = x.numel() / D;
    Grads g;
    if (want_dx) g.dx = Tensor::empty(x.shape());  // (..., D)
    if (want_dgamma) g.dgamma = Tensor::empty({D});
    if (want_dbeta) g.dbeta = Tensor::empty({D});
    auto ptr = [](Tensor& t) { return t.defined() ? t.data() : nullptr; };
    layernorm_backward(ptr(g.dx), ptr(g.dgamma), ptr(g.dbeta), dy.data(), x.data(), gamma.data(),
                       mean.data(), rstd.data(), N, D);
    return g;
  }
  void release() { x = gamma = mean = rstd = Tensor(); }
};

// Inputs (x, gamma, beta).
struct LayerNormNode : Node {
  LayerNormSaved saved;
  const char* name() const override { return "layer_norm"; }
  OpDoc doc() const override {
    return {"y = xhat * gamma + beta,  xhat = (x - mean) * rstd,  rstd = 1/sqrt(var + eps)",
            "dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),  dxhat = dy * gamma",
            "docs/layernorm-backward.md#backward-step-by-step"};
  }
  TensorList backward(const Tensor& dy) override {
    LayerNormSaved::Grads g = saved.backward(dy, needs_grad(0), needs_grad(1), needs_grad(2));
    return {g.dx, g.dgamma, g.dbeta};
  }
  void release_saved() override { saved.release(); }
};

// The checks shared by layer_norm and add_layer_norm; `op` names the public
// function in the message. Returns D.
int64_t check_layer_norm_args(const char* op, const Tensor& x, const Tensor& gamma,
                              const Tensor& beta, real eps) {
  if (x.dim() < 1)
    throw Error(std::string(op) + ": input " + to_string(x.shape()) +
                " must have a last dimension D");
  const int64_t D = x.size(-1);
  if (gamma.shape() != Shape{D} || beta.shape() != Shape{D})
    throw Error(std::string(op) + ": input " + to_string(x.shape()) +
                " needs gamma and beta of shape (" + std::to_string(D) + "), got gamma " +
                to_string(gamma.shape()) + " and beta " + to_string(beta.shape()));
  if (D == 0)
    throw Error(std::string(op) + ": input " + to_string(x.shape()) + " has an empty last dim");
  if (!(eps >= 0)) throw Error(std::string(op) + ": eps must be >= 0, got " + std::to_string(eps));
  return D;
}
}  // namespace

// ============================================================================
// 5. The public op
// ============================================================================

Var layer_norm(const Var& x, const Var& gamma, const Var& beta, real eps) {
  const Tensor& X = x.data();      // (..., D), N rows
  const Tensor& G = gamma.data();  // (D)
  const Tensor& Bt = beta.data();  // (D)
  const int64_t D = check_layer_norm_args("layer_norm", X, G, Bt, eps);
  const int64_t N = X.numel() / D;
  Tensor Y = Tensor::empty(X.shape());                          // (..., D)
  Tensor mean = Tensor::empty({N}), rstd = Tensor::empty({N});  // (N)
  layernorm_forward(Y.data(), mean.data(), rstd.data(), X.data(), G.data(), Bt.data(), N, D, eps);

  auto node = make_node<LayerNormNode>();
  node->saved = {X, G, mean, rstd};  // X is the input itself: no copy
  return make_result(Y, node, {x, gamma, beta});
}

// ============================================================================
// 6. The Post-LN residual fusion: add_layer_norm(a, b) = layer_norm(a + b)
// ============================================================================
// A Post-LN sublayer ends in norm(x + f(x)). Made as add then layer_norm, the
// sum is written to an (N, D) buffer in one pass over memory and read back by
// the norm in another. Here each row's sum is made just before that row is
// normalised, while a and b are in L1 cache: one pass over (N, D) less, and
// one node less in the graph. The sum itself is still written and kept, as
// composed: backward needs the normalised rows x = a + b.
// Backward is layer_norm's, and both addends get the same dx, since
// d(a + b)/da = d(a + b)/db = 1.

namespace {
// x (N, D) = a + b, and layernorm_forward of it, row by row. a, b (N, D).
void add_layernorm_forward(real* y, real* x, real* mean, real* rstd, const real* a_, const real* b_,
                           const real* gamma, const real* beta, int64_t N, int64_t D, real eps) {
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
          layernorm_forward_row(xr, gamma, beta, D, eps, y + r * D, mean + r, rstd + r);
        }
      },
      grain_for(D));
}

// Inputs (a, b, gamma, beta); saved.x holds the sum a + b.
struct AddLayerNormNode : Node {
  LayerNormSaved saved;
  const char* name() const override { return "add_layer_norm"; }
  OpDoc doc() const override {
    return {"y = layer_norm(a + b)  (the residual sum and LayerNorm in one pass)",
            "da = db = dx of layer_norm = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))",
            "docs/layernorm-backward.md#backward-step-by-step"};
  }
  TensorList backward(const Tensor& dy) override {
    LayerNormSaved::Grads g =
        saved.backward(dy, needs_grad(0) || needs_grad(1), needs_grad(2), needs_grad(3));
    return {needs_grad(0) ? g.dx : Tensor(), needs_grad(1) ? g.dx : Tensor(), g.dgamma, g.dbeta};
  }
  void release_saved() override { saved.release(); }
};
}  // namespace

Var add_layer_norm(const Var& a, const Var& b, const Var& gamma, const Var& beta, real eps) {
  const Tensor& A = a.data();      // (..., D), N rows
  const Tensor& Bs = b.data();     // (..., D)
  const Tensor& G = gamma.data();  // (D)
  const Tensor& Bt = beta.data();  // (D)
  if (Bs.shape() != A.shape())
    throw Error("add_layer_norm: addends " + to_string(A.shape()) + " and " +
                to_string(Bs.shape()) + " must have the same shape");
  const int64_t D = check_layer_norm_args("add_layer_norm", A, G, Bt, eps);
  const int64_t N = A.numel() / D;
  Tensor X = Tensor::empty(A.shape());                          // (..., D): a + b
  Tensor Y = Tensor::empty(A.shape());                          // (..., D)
  Tensor mean = Tensor::empty({N}), rstd = Tensor::empty({N});  // (N)
  add_layernorm_forward(Y.data(), X.data(), mean.data(), rstd.data(), A.data(), Bs.data(), G.data(),
                        Bt.data(), N, D, eps);

  auto node = make_node<AddLayerNormNode>();
  node->saved = {X, G, mean, rstd};
  return make_result(Y, node, {a, b, gamma, beta});
}

// ============================================================================
// 7. The module
// ============================================================================

LayerNorm::LayerNorm(int64_t D_, real eps_) : Norm(D_, eps_) {
  if (D <= 0) throw Error("LayerNorm: D must be positive, got " + std::to_string(D));
  weight = register_parameter("weight", Tensor::ones({D}));
  bias = register_parameter("bias", Tensor::zeros({D}));
}

}  // namespace qkv::nn
