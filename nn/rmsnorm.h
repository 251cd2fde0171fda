// nn::RMSNorm (Zhang and Sennrich, 2019): scale each row of the last
// dimension D by the inverse of its root mean square, then by a learned gain:
//   y = x * rrms * gamma,   rrms = 1 / sqrt(mean(x^2) + eps).
// LayerNorm without the mean subtraction and without the shift beta: what
// Llama and T5 use. Two kernels over flat rows (rmsnorm_forward,
// rmsnorm_backward), one autograd op on top (nn::rms_norm) that saves only the
// per-row rrms (plus x and gamma, which it reads anyway), and the Post-LN
// residual fusion nn::add_rms_norm = rms_norm(a + b). The derivation is in
// nn/rmsnorm.cpp and docs/rmsnorm-backward.md.
#pragma once
#include "nn/norm.h"

namespace qkv::nn {

// ---- the kernels: plain loops over N rows of D numbers ----------------------

// y (N, D) = x * rrms * gamma, row by row; writes the row statistic
// rrms (N) that rmsnorm_backward needs. x (N, D), gamma (D).
void rmsnorm_forward(real* y, real* rrms, const real* x, const real* gamma, int64_t N, int64_t D,
                     real eps);

// The gradients of rmsnorm_forward, given dy = dL/dy (N, D) and what the
// forward read and wrote (x (N, D), gamma (D), rrms (N)):
//   dx (N, D)  = rrms * (dxhat - xhat * mean(dxhat * xhat)),
//                dxhat = dy * gamma, xhat = x * rrms   (the mean over the row)
//   dgamma (D) = sum over rows of dy * xhat.
// Either of dx, dgamma may be null: that gradient is not computed.
void rmsnorm_backward(real* dx, real* dgamma, const real* dy, const real* x, const real* gamma,
                      const real* rrms, int64_t N, int64_t D);

// ---- the autograd ops --------------------------------------------------------

// x (..., D), gamma (D) -> (..., D). The graph shows it as "rms_norm".
Var rms_norm(const Var& x, const Var& gamma, real eps = 1e-6);

// rms_norm(a + b, gamma), the Post-LN residual norm(x + f(x)) with the sum
// made in the same pass over each row. a and b (..., D) of the same shape.
// The graph shows it as "add_rms_norm".
Var add_rms_norm(const Var& a, const Var& b, const Var& gamma, real eps = 1e-6);

// ---- the module --------------------------------------------------------------

class RMSNorm : public Norm {
 public:
  explicit RMSNorm(int64_t D, real eps = 1e-6);
  Var forward(const Var& x) const override {
    ModuleScope scope(this);
    return rms_norm(x, weight, eps);
  }
  // norm(x + fx) in one op (add_rms_norm): Post-LN's norm(x + f(x)), x the
  // skip path and fx the sublayer's output.
  Var add_norm(const Var& x, const Var& fx) const override {
    ModuleScope scope(this);
    return add_rms_norm(x, fx, weight, eps);
  }
  Var forward(const Var& x, const Var& fx) const { return add_norm(x, fx); }
  Var operator()(const Var& x) const { return forward(x); }
  Var operator()(const Var& x, const Var& fx) const { return add_norm(x, fx); }

  // D, eps and weight (gamma (D), ones): nn::Norm's; no bias (it stays undefined).
};

}  // namespace qkv::nn
