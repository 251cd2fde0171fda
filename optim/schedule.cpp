#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace qkv::optim {

namespace {

void check_step(int64_t step, const char* schedule) {
  if (step < 1)
    throw Error(std::string(schedule) + ".lr: step " + std::to_string(step) +
                " < 1 (steps are counted from 1)");
}

void require(bool ok, const char* schedule, const std::string& what) {
  if (!ok) throw Error(std::string(schedule) + ": " + what);
}

}  // namespace

NoamSchedule::NoamSchedule(int64_t d_model, int64_t warmup, real factor)
    : d_model_(d_model), warmup_(warmup), factor_(factor) {
  require(d_model > 0, "NoamSchedule", "d_model must be > 0, got " + std::to_string(d_model));
  require(warmup > 0, "NoamSchedule", "warmup must be > 0, got " + std::to_string(warmup));
  require(std::isfinite(factor) && factor > 0, "NoamSchedule",
          "factor must be finite and > 0, got " + std::to_string(factor));
}

real NoamSchedule::lr(int64_t step) const {
  check_step(step, "NoamSchedule");
  const double s = static_cast<double>(step), w = static_cast<double>(warmup_);
  return static_cast<real>(double(factor_) / std::sqrt(double(d_model_)) *
                           std::min(1 / std::sqrt(s), s / (w * std::sqrt(w))));
}

WarmupCosineSchedule::WarmupCosineSchedule(real peak_lr, int64_t warmup, int64_t total_steps,
                                           real min_lr)
    : peak_(peak_lr), min_(min_lr), warmup_(warmup), total_(total_steps) {
  const char* me = "WarmupCosineSchedule";
  require(std::isfinite(peak_lr) && peak_lr >= 0, me,
          "peak_lr must be finite and >= 0, got " + std::to_string(peak_lr));
  require(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= peak_lr, me,
          "min_lr must be in [0, peak_lr = " + std::to_string(peak_lr) + "], got " +
              std::to_string(min_lr));
  require(warmup >= 0, me, "warmup must be >= 0, got " + std::to_string(warmup));
  require(total_steps >= 1 && total_steps >= warmup, me,
          "total_steps must be >= max(warmup, 1), got total_steps " + std::to_string(total_steps) +
              " with warmup " + std::to_string(warmup));
}

real WarmupCosineSchedule::lr(int64_t step) const {
  check_step(step, "WarmupCosineSchedule");
  if (step <= warmup_) return static_cast<real>(double(peak_) * double(step) / double(warmup_));
  if (step > total_) return min_;  // also covers total == warmup
  const double progress = double(step - warmup_) / double(total_ - warmup_);  // (0, 1]
  const double pi = 3.14159265358979323846;
  return static_cast<real>(double(min_) +
                           (double(peak_) - double(min_)) * 0.5 * (1 + std::cos(pi * progress)));
}

ConstantSchedule::ConstantSchedule(real lr, int64_t warmup) : lr_(lr), warmup_(warmup) {
  require(std::isfinite(lr) && lr >= 0, "ConstantSchedule",
          "lr must be finite and >= 0, got " + std::to_string(lr));
  require(warmup >= 0, "ConstantSchedule", "warmup must be >= 0, got " + std::to_string(warmup));
}

real ConstantSchedule::lr(int64_t step) const {
  check_step(step, "ConstantSchedule");
  if (step >= warmup_) return lr_;
  return static_cast<real>(double(lr_) * double(step) / double(warmup_));
}

}  // namespace qkv::optim
