// nn::LayerNorm: normalise each row of the last dimension D to zero mean and
// unit (biased) variance, then scale by gamma and shift by beta:
//   y = (x - mean) * rstd * gamma + beta,   rstd = 1 / sqrt(var + eps).
// Two kernels over flat rows (layernorm_forward, layernorm_backward), one
// autograd op on top of them (nn::layer_norm) that saves only the per-row mean
// and rstd (plus x and gamma, which it reads anyway), and the Post-LN residual
// fusion nn::add_layer_norm = layer_norm(a + b). The derivation is in
// nn/layernorm.cpp and docs/layernorm-backward.md.
#pragma once
#include "nn/module.h"
#include "nn/norm.h"

namespace qkv::nn {

// ---- the kernels: plain loops over N rows of D numbers ----------------------

// y (N, D) = (x - mean) * rstd * gamma + beta, row by row; writes the row
// statistics mean (N) and rstd (N) that layernorm_backward needs.
// x (N, D), gamma (D), beta (D).
void layernorm_forward(real* y, real* mean, real* rstd, const real* x, const real* gamma,
                       const real* beta, int64_t N, int64_t D, real eps);

// The gradients of layernorm_forward, given dy = dL/dy (N, D) and what the
// forward read and wrote (x (N, D), gamma (D), mean (N), rstd (N)):
//   dx (N, D) = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),
//               dxhat = dy * gamma, xhat = (x - mean) * rstd   (means over the row)
//   dgamma (D) = sum over rows of dy * xhat,   dbeta (D) = sum over rows of dy.
// Any of dx, dgamma, dbeta may be null: that gradient is not computed.
void layernorm_backward(real* dx, real* dgamma, real* dbeta, const real* dy, const real* x,
                        const real* gamma, const real* mean, const real* rstd, int64_t N,
                        int64_t D);

// ---- the autograd ops --------------------------------------------------------

// x (..., D), gamma (D), beta (D) -> (..., D). The graph shows it as "layer_norm".
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, real eps = 1e-5);

// layer_norm(a + b, gamma, beta), the Post-LN residual norm(x + f(x)), with
// the sum made in the same pass over each row instead of a separate add.
// a and b (..., D) of the same shape. The graph shows it as "add_layer_norm".
Var add_layer_norm(const Var& a, const Var& b, const Var& gamma, const Var& beta, real eps = 1e-5);

// ---- the module --------------------------------------------------------------

// The "layer" row of nn::Norm's table (nn/norm.h).
class LayerNorm : public Norm {
 public:
  explicit LayerNorm(int64_t D, real eps = 1e-5);
  Var forward(const Var& x) const override {
    ModuleScope scope(this);
    return layer_norm(x, weight, bias, eps);
  }
  // norm(x + fx) in one op (add_layer_norm): Post-LN's norm(x + f(x)), x the
  // skip path and fx the sublayer's output.
  Var add_norm(const Var& x, const Var& fx) const override {
    ModuleScope scope(this);
    return add_layer_norm(x, fx, weight, bias, eps);
  }
  Var forward(const Var& x, const Var& fx) const { return add_norm(x, fx); }
  Var operator()(const Var& x) const { return forward(x); }
  Var operator()(const Var& x, const Var& fx) const { return add_norm(x, fx); }

  // D, eps, weight (gamma (D), ones) and bias (beta (D), zeros): nn::Norm's.
};

}  // namespace qkv::nn
