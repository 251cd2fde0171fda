// qkv::optim::Optimizer: the base of SGD, Adam and AdamW. An optimizer holds
// the parameters (leaf Vars; nn::Parameter is the same type) and whatever
// per-parameter state its rule needs, and updates the parameters in place from
// their .grad() on every step():
//
//   optim::Adam opt(model.parameters(), optim::AdamOptions::paper(0));
//   optim::NoamSchedule sched(512, 4000);
//   for (...) {
//     opt.zero_grad();
//     loss.backward();
//     opt.lr = sched.lr(opt.step_count() + 1);
//     opt.step();
//   }
//
// As in PyTorch, a parameter whose grad is undefined (no backward reached it)
// is skipped by step(): neither it nor its state changes.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "autograd/var.h"
#include "core/tensor.h"
#include "io/safetensors.h"  // NamedTensors

namespace qkv::optim {

class Optimizer {
 public:
  // `name` ("SGD", "Adam", ...) prefixes every error message. Throws when
  // params is empty, holds an undefined Var, a non-leaf or the same Var twice,
  // or when lr is negative or not finite.
  Optimizer(std::vector<Var> params, real lr, const char* name);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient; then step_count() += 1.
  virtual void step() = 0;
  // Zeroes every parameter's gradient (keeping the buffers for the next step).
  void zero_grad();

  // The learning rate of the next step. Schedules set it before each step.
  real lr;

  // Number of step() calls so far (restored by load_state_dict).
  int64_t step_count() const { return step_count_; }
  const std::vector<Var>& params() const { return params_; }

  // Which parameters the weight decay applies to (all, unless set): as
  // PyTorch's parameter groups with weight_decay 0 are used to spare biases,
  // LayerNorm gains and embeddings. decayed[i] is parameter i's; the size must
  // be params().size(). nn::weight_decay_mask (checkpoint/) gives the usual one.
  void set_weight_decay_mask(std::vector<bool> decayed);
  bool decays(size_t i) const { return decay_mask_.empty() || decay_mask_[i]; }
  const char* name() const { return name_; }

  // Everything needed to resume, as copies:
  //   "step"          (1)  step_count()
  //   "param_steps"   (N)  how many updates each of the N parameters has had
  //                        (a parameter without a grad is not updated)
  //   "<buffer>.<i>"       the rule's buffers for parameter i, e.g.
  //                        "exp_avg.0"; present for all i after the first
  //                        step, absent before it.
  // Counts are stored as reals: exact up to 2^24 steps in float32.
  virtual NamedTensors state_dict() const;
  // Restores a state_dict() of an optimizer of the same kind over parameters
  // of the same shapes. Checks everything first (unknown or duplicate names,
  // the parameter count, shapes, buffers present for some parameters only,
  // counts that are negative or not whole numbers, a negative number in a
  // buffer its rule keeps non-negative, such as Adam's exp_avg_sq) and throws
  // qkv::Error naming the entry (and the element); on error nothing is changed.
  virtual void load_state_dict(const NamedTensors& state);

 protected:
  // Per-parameter state buffers of the parameter's shape. A rule registers
  // each kind once, in its constructor (add_state("exp_avg") -> k); state(k)[i]
  // is that buffer for parameter i. begin_step() allocates every buffer of
  // every parameter (zeros) on the first step, so steady-state steps allocate
  // nothing and the state is all-or-nothing. A kind registered `non_negative`
  // holds values the rule keeps >= 0 (a mean of squares): load_state_dict
  // refuses a dict with a negative one, which the rule would turn into NaN.
  int add_state(const char* name, bool non_negative = false);
  std::vector<Tensor>& state(int k) { return state_[k].second; }
  const std::vector<Tensor>& state(int k) const { return state_[k].second; }

  // Call at the start of step(), before changing anything: checks lr and that
  // every defined gradient has its parameter's shape (throws otherwise, so a
  // failed step changes nothing), and allocates the state on the first step.
  void begin_step();
  // Call at the end of step(): step_count() += 1.
  void end_step() { ++step_count_; }

  // The gradient of parameter i; undefined when it has none (skip it).
  const Tensor& grad_of(size_t i) const { return params_[i].grad(); }

  std::vector<Var> params_;
  std::vector<int64_t> param_steps_;  // updates of each parameter so far
  std::vector<bool> decay_mask_;      // empty: every parameter is decayed

 private:
  const char* name_;
  int64_t step_count_ = 0;
  std::vector<std::pair<const char*, std::vector<Tensor>>> state_;
  std::vector<bool> non_negative_;  // per state kind: add_state's flag
  bool allocated_ = false;
};

// Throws "<opt>: <what> must be <rule>, got <value>" unless ok.
void check_hyper(bool ok, const char* opt, const char* what, const char* rule, double value);

}  // namespace qkv::optim
