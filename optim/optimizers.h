// The optimizers a program builds by name (the trainer's --optimizer, a
// checkpoint's "optimizer" setting), one row each: the one place their names
// live. Adding an optimizer: its class (optim/<name>.{h,cpp}, deriving from
// optim::Optimizer, whose state_dict comes free) and its row in
// optim/optimizers.cpp.
//
//   const optim::OptimizerKind* k = optim::find_optimizer("adamw");
//   std::unique_ptr<optim::Optimizer> opt = k->make(model.parameters(), settings);
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/registry.h"
#include "optim/optimizer.h"

namespace qkv::optim {

// The settings a row's factory reads (each reads those its rule has).
struct OptimizerSettings {
  real lr = 1e-3;
  real beta1 = 0.9, beta2 = 0.98;  // Adam's (eps is the paper's 1e-9)
  real momentum = 0.9;             // SGD's
  real weight_decay = 0;
};

struct OptimizerKind {
  const char* name;                // "adam", as flags and files spell it
  const char* help;                // one line: what it does
  std::vector<const char*> state;  // its per-parameter buffers in state_dict ("exp_avg.<i>")
  real default_weight_decay;       // when the weight decay is not given (adamw: 0.01)
  std::unique_ptr<Optimizer> (*make)(std::vector<Var> params, const OptimizerSettings& s);
  std::string (*describe)(const OptimizerSettings& s);  // for reports: "Adam(0.9, 0.98, 1e-9)"
};

// Every optimizer, in the order help lists them.
const Registry<OptimizerKind>& optimizer_kinds();

// The row named `name`, or nullptr.
const OptimizerKind* find_optimizer(const std::string& name);

// The names as prose: "adam, adamw or sgd".
std::string optimizer_names();

}  // namespace qkv::optim
