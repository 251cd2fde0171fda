// Learning-rate schedules: lr as a function of the step, counted from 1 (the
// first optimizer step is step 1). Set the optimizer's lr before each step:
//   opt.lr = sched.lr(opt.step_count() + 1);
//   opt.step();
#pragma once
#include <cstdint>

#include "core/real.h"

namespace qkv::optim {

struct Schedule {
  virtual ~Schedule() = default;
  // Throws qkv::Error when step < 1.
  virtual real lr(int64_t step) const = 0;
};

// "Attention Is All You Need", eq. (3):
//   lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
// rises linearly for `warmup` steps, peaks at step = warmup with
// factor * (d_model * warmup)^-0.5, then decays as step^-0.5.
class NoamSchedule : public Schedule {
 public:
  // Throws unless d_model > 0, warmup > 0 and factor > 0.
  NoamSchedule(int64_t d_model, int64_t warmup, real factor = 1);
  real lr(int64_t step) const override;

 private:
  int64_t d_model_, warmup_;
  real factor_;
};

// Linear warmup from 0 to peak_lr over `warmup` steps (peak at step = warmup),
// then a half cosine from peak_lr down to min_lr at step = total_steps, and
// min_lr after it:
//   step <= warmup:          peak * step / warmup
//   warmup < step <= total:  min + (peak - min) * (1 + cos(pi * (step - warmup) / (total -
//   warmup))) / 2 step > total:            min
class WarmupCosineSchedule : public Schedule {
 public:
  // Throws unless 0 <= min_lr <= peak_lr (finite), warmup >= 0 and
  // total_steps >= max(warmup, 1).
  WarmupCosineSchedule(real peak_lr, int64_t warmup, int64_t total_steps, real min_lr = 0);
  real lr(int64_t step) const override;

 private:
  real peak_, min_;
  int64_t warmup_, total_;
};

// A constant lr, optionally reached by a linear warmup: lr * min(1, step / warmup).
class ConstantSchedule : public Schedule {
 public:
  // Throws unless lr is finite and >= 0 and warmup >= 0 (0 = no warmup).
  explicit ConstantSchedule(real lr, int64_t warmup = 0);
  real lr(int64_t step) const override;

 private:
  real lr_;
  int64_t warmup_;
};

}  // namespace qkv::optim
