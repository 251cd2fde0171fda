// Adam (Kingma & Ba) and AdamW (Loshchilov & Hutter), with PyTorch's exact
// semantics. Per parameter p with gradient g, on its t-th update:
//   g     = g + weight_decay * p                 (Adam: coupled L2)
//   p     = p * (1 - lr * weight_decay)          (AdamW: decoupled decay)
//   m     = beta1 * m + (1 - beta1) * g
//   v     = beta2 * v + (1 - beta2) * g^2
//   p    -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// eps is added after the bias correction of v, as in PyTorch. m, v and p are
// updated in one fused pass over the elements; the state ("exp_avg.<i>" = m,
// "exp_avg_sq.<i>" = v) is allocated on the first step only.
#pragma once
#include "optim/optimizer.h"

namespace qkv::optim {

struct AdamOptions {
  real lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  // "Attention Is All You Need", section 5.3: betas (0.9, 0.98), eps 1e-9.
  // (The paper's lr comes from a NoamSchedule, which overwrites lr each step.)
  static AdamOptions paper(real lr);
};

class Adam : public Optimizer {
 public:
  // Throws on lr, eps or weight_decay negative or not finite, or a beta
  // outside [0, 1).
  explicit Adam(std::vector<Var> params, const AdamOptions& options = AdamOptions());
  Adam(std::vector<Var> params, real lr, real beta1 = 0.9, real beta2 = 0.999, real eps = 1e-8,
       real weight_decay = 0);
  void step() override;

  // The hyperparameters, with the current lr.
  AdamOptions options() const;
  bool decoupled_weight_decay() const { return decoupled_; }

 protected:
  Adam(std::vector<Var> params, const AdamOptions& options, bool decoupled, const char* name);

 private:
  real beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
  int exp_avg_, exp_avg_sq_;  // state indices: m and v
};

// AdamW's options: Adam's, with torch.optim.AdamW's default weight decay
// 0.01 (Adam's is 0). AdamW takes only these, so every way of making one
// starts from the same defaults: AdamW(params) == AdamW(params, AdamWOptions{}).
struct AdamWOptions : AdamOptions {
  AdamWOptions() { weight_decay = real(0.01); }
};

// Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the
// Adam update, instead of adding weight_decay * p to the gradient.
class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Var> params, const AdamWOptions& options = AdamWOptions());
  AdamW(std::vector<Var> params, real lr, real beta1 = 0.9, real beta2 = 0.999, real eps = 1e-8,
        real weight_decay = 0.01);
};

}  // namespace qkv::optim
