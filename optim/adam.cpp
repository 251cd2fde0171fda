#include "optim/adam.h"

#include <cmath>

#include "core/parallel.h"

namespace qkv::optim {

AdamOptions AdamOptions::paper(real lr) {
  AdamOptions o;
  o.lr = lr;
  o.beta1 = real(0.9);
  o.beta2 = real(0.98);
  o.eps = real(1e-9);
  return o;
}

Adam::Adam(std::vector<Var> params, const AdamOptions& o, bool decoupled, const char* name)
    : Optimizer(std::move(params), o.lr, name),
      beta1_(o.beta1),
      beta2_(o.beta2),
      eps_(o.eps),
      weight_decay_(o.weight_decay),
      decoupled_(decoupled) {
  check_hyper(std::isfinite(o.beta1) && o.beta1 >= 0 && o.beta1 < 1, name, "beta1", "in [0, 1)",
              o.beta1);
  check_hyper(std::isfinite(o.beta2) && o.beta2 >= 0 && o.beta2 < 1, name, "beta2", "in [0, 1)",
              o.beta2);
  check_hyper(std::isfinite(o.eps) && o.eps >= 0, name, "eps", "finite and >= 0", o.eps);
  check_hyper(std::isfinite(o.weight_decay) && o.weight_decay >= 0, name, "weight_decay",
              "finite and >= 0", o.weight_decay);
  exp_avg_ = add_state("exp_avg");
  exp_avg_sq_ = add_state("exp_avg_sq", /*non_negative=*/true);  // v, a mean of squares
}

Adam::Adam(std::vector<Var> params, const AdamOptions& options)
    : Adam(std::move(params), options, false, "Adam") {}

Adam::Adam(std::vector<Var> params, real lr, real beta1, real beta2, real eps, real weight_decay)
    : Adam(std::move(params), AdamOptions{lr, beta1, beta2, eps, weight_decay}, false, "Adam") {}

AdamW::AdamW(std::vector<Var> params, real lr, real beta1, real beta2, real eps, real weight_decay)
    : Adam(std::move(params), AdamOptions{lr, beta1, beta2, eps, weight_decay}, true, "AdamW") {}

AdamW::AdamW(std::vector<Var> params, const AdamWOptions& options)
    : Adam(std::move(params), options, true, "AdamW") {}

AdamOptions Adam::options() const { return AdamOptions{lr, beta1_, beta2_, eps_, weight_decay_}; }

namespace {

// The constants of one parameter's update at step t.
struct AdamStep {
  real l2;     // added to g: weight_decay (Adam) or 0 (AdamW)
  real decay;  // p is scaled by it: 1 - lr * weight_decay (AdamW) or 1 (Adam)
  real beta1, one_minus_beta1, beta2, one_minus_beta2;
  real step_size;  // lr / (1 - beta1^t)
  real bc2_sqrt;   // sqrt(1 - beta2^t)
  real eps;
};

// One fused pass over elements [b, e): m, v and p each read and written once,
// no branches. (GCC vectorises it only with -fno-math-errno: otherwise each
// sqrt keeps a branch to libm for negative inputs, which v never is.)
void adam_update(const AdamStep c, int64_t b, int64_t e, real* __restrict p,
                 const real* __restrict grad, real* __restrict m, real* __restrict v) {
  for (int64_t j = b; j < e; ++j) {
    const real g = grad[j] + c.l2 * p[j];                        // (Adam) g + wd p
    const real mj = c.beta1 * m[j] + c.one_minus_beta1 * g;      // first moment
    const real vj = c.beta2 * v[j] + c.one_minus_beta2 * g * g;  // second moment
    m[j] = mj;
    v[j] = vj;
    const real denom = std::sqrt(vj) / c.bc2_sqrt + c.eps;  // sqrt(v_hat) + eps
    p[j] = p[j] * c.decay - c.step_size * (mj / denom);
  }
}

}  // namespace

void Adam::step() {
  begin_step();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& grad = grad_of(i);
    if (!grad.defined()) continue;  // no gradient: skipped, as in PyTorch
    // Bias corrections in double, as PyTorch computes them in Python floats.
    const double t = static_cast<double>(++param_steps_[i]);
    const double bc1 = 1 - std::pow(double(beta1_), t);
    const double bc2 = 1 - std::pow(double(beta2_), t);
    AdamStep c;
    const real wd = decays(i) ? weight_decay_ : real(0);
    c.l2 = decoupled_ ? real(0) : wd;
    c.decay = decoupled_ ? real(1 - double(lr) * wd) : real(1);
    c.beta1 = beta1_;
    c.one_minus_beta1 = real(1 - double(beta1_));
    c.beta2 = beta2_;
    c.one_minus_beta2 = real(1 - double(beta2_));
    c.step_size = real(double(lr) / bc1);
    c.bc2_sqrt = real(std::sqrt(bc2));
    c.eps = eps_;
    real* p = params_[i].data().data();
    const real* g = grad.data();
    real* m = state(exp_avg_)[i].data();
    real* v = state(exp_avg_sq_)[i].data();
    parallel_for(grad.numel(), [=](int64_t b, int64_t e) { adam_update(c, b, e, p, g, m, v); });
  }
  end_step();
}

}  // namespace qkv::optim
