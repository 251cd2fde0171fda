// Stochastic gradient descent with momentum, dampening, Nesterov momentum and
// (coupled, L2) weight decay, with PyTorch's exact semantics. Per parameter p
// with gradient g, on its t-th update:
//   d   = g + weight_decay * p
//   buf = d                                          (t = 1)
//   buf = momentum * buf + (1 - dampening) * d       (t > 1)
//   u   = nesterov ? d + momentum * buf : buf        (u = d when momentum = 0)
//   p  -= lr * u
#pragma once
#include "optim/optimizer.h"

namespace qkv::optim {

class SGD : public Optimizer {
 public:
  // Throws on a negative or non-finite lr, momentum, weight_decay or
  // dampening, and on nesterov without momentum or with dampening (as PyTorch).
  SGD(std::vector<Var> params, real lr, real momentum = 0, real weight_decay = 0,
      bool nesterov = false, real dampening = 0);
  void step() override;

  real momentum() const { return momentum_; }
  real weight_decay() const { return weight_decay_; }
  real dampening() const { return dampening_; }
  bool nesterov() const { return nesterov_; }

 private:
  real momentum_, weight_decay_, dampening_;
  bool nesterov_;
  int buf_ = -1;  // state "momentum.<i>" (only when momentum != 0)
};

}  // namespace qkv::optim
