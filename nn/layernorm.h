// nn::LayerNorm: normalise each row of the last dimension D to zero mean and
// unit (biased) variance, then scale by gamma and shift by beta:
//   y = (x - mean) * rstd * gamma + beta,   rstd = 1 / sqrt(var + eps).
// One fused op (nn::layer_norm) with a hand-written backward; it saves only
// the per-row mean and rstd (plus x and gamma, which it reads anyway).
#pragma once
#include "nn/module.h"

namespace qkv::nn {

// x (..., D), gamma (D), beta (D) -> (..., D).
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, real eps = 1e-5);

// layer_norm(a + b, gamma, beta), the Post-LN residual norm(x + f(x)), with
// the sum made in the same pass over each row instead of a separate add.
// a and b (..., D) of the same shape.
Var add_layer_norm(const Var& a, const Var& b, const Var& gamma, const Var& beta,
                   real eps = 1e-5);

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t D, real eps = 1e-5);
  Var forward(const Var& x) const {
    ModuleScope scope(this);
    return layer_norm(x, weight, bias, eps);
  }
  // norm(x + fx) in one op (add_layer_norm): Post-LN's norm(x + f(x)), x the
  // skip path and fx the sublayer's output.
  Var forward(const Var& x, const Var& fx) const {
    ModuleScope scope(this);
    return add_layer_norm(x, fx, weight, bias, eps);
  }
  Var operator()(const Var& x) const { return forward(x); }
  Var operator()(const Var& x, const Var& fx) const { return forward(x, fx); }

  int64_t D;
  real eps;
  Parameter weight;  // gamma (D), ones
  Parameter bias;    // beta (D), zeros
};

}  // namespace qkv::nn
