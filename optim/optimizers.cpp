#include "optim/optimizers.h"

#include <cstdio>

#include "core/error.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace qkv::optim {

namespace {

AdamOptions adam_options(const OptimizerSettings& s) {
  AdamOptions a = AdamOptions::paper(s.lr);  // eps 1e-9
  a.beta1 = s.beta1;
  a.beta2 = s.beta2;
  a.weight_decay = s.weight_decay;
  return a;
}

std::string describe_adam(const char* name, const OptimizerSettings& s) {
  char text[120];
  std::snprintf(text, sizeof text, "%s(%g, %g, 1e-9)", name, double(s.beta1), double(s.beta2));
  return text;
}

}  // namespace

const Registry<OptimizerKind>& optimizer_kinds() {
  static const Registry<OptimizerKind> table{
      "optimizer",
      {
          {"adam",
           "Adam with the paper's eps 1e-9 (coupled L2 weight decay)",
           {"exp_avg", "exp_avg_sq"},
           real(0),
           [](std::vector<Var> p, const OptimizerSettings& s) -> std::unique_ptr<Optimizer> {
             return std::make_unique<Adam>(std::move(p), adam_options(s));
           },
           [](const OptimizerSettings& s) { return describe_adam("Adam", s); }},
          {"adamw",
           "Adam with decoupled weight decay (default 0.01, as torch.optim.AdamW)",
           {"exp_avg", "exp_avg_sq"},
           real(0.01),
           [](std::vector<Var> p, const OptimizerSettings& s) -> std::unique_ptr<Optimizer> {
             AdamWOptions w;
             static_cast<AdamOptions&>(w) = adam_options(s);
             return std::make_unique<AdamW>(std::move(p), w);
           },
           [](const OptimizerSettings& s) { return describe_adam("AdamW", s); }},
          {"sgd",
           "SGD with momentum (coupled L2 weight decay)",
           {"momentum"},
           real(0),
           [](std::vector<Var> p, const OptimizerSettings& s) -> std::unique_ptr<Optimizer> {
             return std::make_unique<SGD>(std::move(p), s.lr, s.momentum, s.weight_decay);
           },
           [](const OptimizerSettings& s) {
             char text[120];
             std::snprintf(text, sizeof text, "SGD(momentum %g)", double(s.momentum));
             return std::string(text);
           }},
      }};
  return table;
}

const OptimizerKind* find_optimizer(const std::string& name) {
  return optimizer_kinds().find(name);
}

std::string optimizer_names() { return optimizer_kinds().names(); }

}  // namespace qkv::optim
