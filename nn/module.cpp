#include "nn/module.h"

#include <unordered_set>

#include "core/error.h"

namespace qkv::nn {

void Module::collect(const std::string& prefix,
                     std::vector<std::pair<std::string, Var>>& out) const {
  for (const auto& [name, v] : params_) out.emplace_back(prefix + name, v);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Var>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Var>> all, unique;
  collect("", all);
  std::unordered_set<VarImpl*> seen;
  for (auto& p : all)
    if (seen.insert(p.second.impl()).second) unique.push_back(std::move(p));
  return unique;
}

std::vector<Var> Module::parameters() const {
  std::vector<Var> out;
  for (auto& [name, v] : named_parameters()) out.push_back(v);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, v] : named_parameters()) n += v.numel();
  return n;
}

void Module::zero_grad() {
  for (auto& [name, v] : named_parameters()) v.zero_grad();
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

Parameter Module::register_parameter(const std::string& name, Tensor init) {
  return register_parameter(name, Var(std::move(init), true));
}

Parameter Module::register_parameter(const std::string& name, Var shared) {
  for (const auto& [n, v] : params_)
    if (n == name) throw Error("register_parameter: a parameter named '" + name + "' exists");
  if (!shared.is_leaf()) throw Error("register_parameter: '" + name + "' must be a leaf Var");
  shared.requires_grad_(true);
  params_.emplace_back(name, shared);
  return shared;
}

}  // namespace qkv::nn
