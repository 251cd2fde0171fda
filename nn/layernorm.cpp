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

namespace qkv::nn {

namespace {
// Row loops parallelise once the whole tensor is as big as one parallel grain.
int64_t row_grain(int64_t D) { return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(D, 1)); }
}  // namespace

// Saved: x (N, D) and gamma (D) as given, and per row the mean and rstd (N).
// N = product of x's leading dims. xhat = (x - mean) * rstd is recomputed.
// For add_layer_norm, x is the sum a + b it normalised, and the inputs are
// (a, b, gamma, beta): both addends get dx, since d(a + b)/da = d(a + b)/db = 1.
struct LayerNormNode : Node {
  Tensor x, gamma, mean, rstd;
  bool summed = false;  // add_layer_norm: two inputs before gamma
  const char* name() const override { return summed ? "add_layer_norm" : "layer_norm"; }

  // With xhat = (x - mu) rstd and dxhat = dy * gamma, differentiating through mu and rstd:
  // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))   (means over the row)
  // dgamma = sum_rows(dy * xhat);  dbeta = sum_rows(dy)
  TensorList backward(const Tensor& g) override {
    const int64_t D = gamma.numel(), N = x.numel() / D;
    const size_t ig = summed ? 2 : 1;  // index of gamma among the inputs
    const bool want_dx = needs_grad(0) || (summed && needs_grad(1));
    const bool want_dg = needs_grad(ig), want_db = needs_grad(ig + 1);
    Tensor dx = want_dx ? Tensor::empty(x.shape()) : Tensor();
    // dgamma and dbeta: each thread sums its rows into its own row of
    // `partial` (threads, 2D) = [dgamma | dbeta]; the rows are added in thread
    // order afterwards, so the sums do not depend on which thread ends first.
    const bool want_params = want_dg || want_db;
    const ThreadSlots slots;
    Tensor partial = want_params ? Tensor::zeros({slots.count(), 2 * D}) : Tensor();
    const real* __restrict xp = x.data();
    const real* __restrict gp = g.data();
    const real* __restrict gam = gamma.data();
    const real* __restrict mu = mean.data();
    const real* __restrict rs = rstd.data();
    real* dxp = want_dx ? dx.data() : nullptr;
    const real invD = real(1) / static_cast<real>(D);

    parallel_for(
        N,
        [&](int64_t r0, int64_t r1) {
          real* __restrict lg = want_params ? partial.data() + slots.slot() * 2 * D : nullptr;
          real* __restrict lb = want_params ? lg + D : nullptr;
          for (int64_t r = r0; r < r1; ++r) {
            const real* __restrict xr = xp + r * D;
            const real* __restrict gr = gp + r * D;
            const real m = mu[r], s = rs[r];
            // One pass for the parameter sums and the two row means
            // a = mean(dxhat), b = mean(dxhat * xhat).
            real a = 0, b = 0;
            if (want_params) {
#pragma omp simd reduction(+ : a, b)
              for (int64_t j = 0; j < D; ++j) {
                const real xh = (xr[j] - m) * s;
                lg[j] += gr[j] * xh;
                lb[j] += gr[j];
                const real dxh = gr[j] * gam[j];
                a += dxh;
                b += dxh * xh;
              }
            } else {
#pragma omp simd reduction(+ : a, b)
              for (int64_t j = 0; j < D; ++j) {
                const real dxh = gr[j] * gam[j];
                a += dxh;
                b += dxh * (xr[j] - m) * s;
              }
            }
            if (!want_dx) continue;
            a *= invD;
            b *= invD;
            real* __restrict dr = dxp + r * D;
#pragma omp simd
            for (int64_t j = 0; j < D; ++j)
              dr[j] = s * (gr[j] * gam[j] - a - (xr[j] - m) * s * b);
          }
        },
        row_grain(D));
    Tensor dgamma, dbeta;
    if (want_params) {
      Tensor sums = Tensor::empty({2 * D});
      sum_rows(partial.data(), slots.count(), 2 * D, sums.data());
      if (want_dg) dgamma = sums.slice0(0, D);
      if (want_db) dbeta = sums.slice0(D, 2 * D);
    }
    if (summed) return {needs_grad(0) ? dx : Tensor(), needs_grad(1) ? dx : Tensor(), dgamma, dbeta};
    return {dx, dgamma, dbeta};
  }
  void release_saved() override { x = gamma = mean = rstd = Tensor(); }
};

namespace {
// layer_norm(a, ...) when b is null, else layer_norm(a + b, ...) with the sum
// made row by row in the same pass and kept for backward. `op` names the
// public function in errors.
Var layer_norm_of(const char* op, const Var& a, const Var* b, const Var& gamma, const Var& beta,
                  real eps) {
  const Tensor& A = a.data();
  const Tensor& G = gamma.data();
  const Tensor& Bt = beta.data();
  if (b && b->shape() != A.shape())
    throw Error(std::string(op) + ": addends " + to_string(A.shape()) + " and " +
                to_string(b->shape()) + " must have the same shape");
  if (A.dim() < 1)
    throw Error(std::string(op) + ": input " + to_string(A.shape()) +
                " must have a last dimension D");
  const int64_t D = A.size(-1);
  if (G.shape() != Shape{D} || Bt.shape() != Shape{D})
    throw Error(std::string(op) + ": input " + to_string(A.shape()) +
                " needs gamma and beta of shape (" + std::to_string(D) + "), got gamma " +
                to_string(G.shape()) + " and beta " + to_string(Bt.shape()));
  if (D == 0)
    throw Error(std::string(op) + ": input " + to_string(A.shape()) + " has an empty last dim");
  if (!(eps >= 0))
    throw Error(std::string(op) + ": eps must be >= 0, got " + std::to_string(eps));
  const int64_t N = A.numel() / D;

  // X: the rows normalised, a itself or the sum a + b (N, D).
  Tensor X = b ? Tensor::empty(A.shape()) : A;
  Tensor Y = Tensor::empty(A.shape());
  Tensor mean = Tensor::empty({N}), rstd = Tensor::empty({N});
  const real* __restrict ap = A.data();
  const real* __restrict bsp = b ? b->data().data() : nullptr;
  real* __restrict sum = b ? X.data() : nullptr;
  const real* __restrict gp = G.data();
  const real* __restrict bp = Bt.data();
  real* __restrict yp = Y.data();
  real* __restrict mp = mean.data();
  real* __restrict sp = rstd.data();
  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const real* xr = ap + r * D;  // not restrict: it may become sr below
          if (sum) {  // x = a + b, this row, while a and b are in L1
            real* __restrict sr = sum + r * D;
            const real* __restrict br = bsp + r * D;
#pragma omp simd
            for (int64_t j = 0; j < D; ++j) sr[j] = xr[j] + br[j];
            xr = sr;
          }
          // One pass over the row for mean and variance. Shifting by the row's
          // first element keeps sum(d^2) - sum(d)^2 / D from cancelling when the
          // row sits far from zero (var = E[d^2] - E[d]^2 with d = x - x0).
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
          const real m = static_cast<real>(shift + md);
          const real s = static_cast<real>(1.0 / std::sqrt(var + eps));
          mp[r] = m;
          sp[r] = s;
          real* __restrict yr = yp + r * D;
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) yr[j] = (xr[j] - m) * s * gp[j] + bp[j];
        }
      },
      row_grain(D));

  auto node = make_node<LayerNormNode>();
  node->x = X;
  node->gamma = G;
  node->mean = mean;
  node->rstd = rstd;
  node->summed = b != nullptr;
  if (b) return make_result(Y, node, {a, *b, gamma, beta});
  return make_result(Y, node, {a, gamma, beta});
}
}  // namespace

Var layer_norm(const Var& x, const Var& gamma, const Var& beta, real eps) {
  return layer_norm_of("layer_norm", x, nullptr, gamma, beta, eps);
}

Var add_layer_norm(const Var& a, const Var& b, const Var& gamma, const Var& beta, real eps) {
  return layer_norm_of("add_layer_norm", a, &b, gamma, beta, eps);
}

LayerNorm::LayerNorm(int64_t D_, real eps_) : D(D_), eps(eps_) {
  if (D <= 0) throw Error("LayerNorm: D must be positive, got " + std::to_string(D));
  weight = register_parameter("weight", Tensor::ones({D}));
  bias = register_parameter("bias", Tensor::zeros({D}));
}

}  // namespace qkv::nn
