#include "optim/sgd.h"

#include <cmath>

#include "core/parallel.h"

namespace qkv::optim {

SGD::SGD(std::vector<Var> params, real lr, real momentum, real weight_decay, bool nesterov,
         real dampening)
    : Optimizer(std::move(params), lr, "SGD"),
      momentum_(momentum),
      weight_decay_(weight_decay),
      dampening_(dampening),
      nesterov_(nesterov) {
  check_hyper(std::isfinite(momentum) && momentum >= 0, "SGD", "momentum", "finite and >= 0",
              momentum);
  check_hyper(std::isfinite(weight_decay) && weight_decay >= 0, "SGD", "weight_decay",
              "finite and >= 0", weight_decay);
  check_hyper(std::isfinite(dampening) && dampening >= 0, "SGD", "dampening", "finite and >= 0",
              dampening);
  check_hyper(!nesterov || momentum > 0, "SGD", "momentum", "> 0 with nesterov", momentum);
  check_hyper(!nesterov || dampening == 0, "SGD", "dampening", "0 with nesterov", dampening);
  if (momentum_ != 0) buf_ = add_state("momentum");
}

void SGD::step() {
  begin_step();
  const real lr_ = lr, mom = momentum_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& grad = grad_of(i);
    if (!grad.defined()) continue;  // no gradient: skipped, as in PyTorch
    const real wd = decays(i) ? weight_decay_ : real(0);
    const bool first = ++param_steps_[i] == 1;
    real* __restrict p = params_[i].data().data();
    const real* __restrict g = grad.data();
    const int64_t n = grad.numel();
    if (mom == 0) {
      parallel_for(n, [=](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) p[j] -= lr_ * (g[j] + wd * p[j]);
      });
      continue;
    }
    real* __restrict buf = state(buf_)[i].data();
    // First update: buf = d, i.e. buf = 0 * buf + 1 * d (buf starts at zero).
    const real keep = first ? real(0) : mom;
    const real take = first ? real(1) : real(1) - dampening_;
    if (nesterov_) {
      parallel_for(n, [=](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) {
          const real d = g[j] + wd * p[j];
          buf[j] = keep * buf[j] + take * d;
          p[j] -= lr_ * (d + mom * buf[j]);
        }
      });
    } else {
      parallel_for(n, [=](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) {
          const real d = g[j] + wd * p[j];
          buf[j] = keep * buf[j] + take * d;
          p[j] -= lr_ * buf[j];
        }
      });
    }
  }
  end_step();
}

}  // namespace qkv::optim
