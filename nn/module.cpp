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

void Module::set_probe(Probe* p) {
  probe_ = p;
  for (auto& [name, child] : children_) child->set_probe(p);
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

// ---- module scopes (detect-anomaly mode) ----------------------------------------------
namespace {
thread_local const Module* t_module = nullptr;  // the innermost module whose forward runs

// The dotted path from `from` down to its descendant `to` ("layers.0.ffn"),
// by the names named_parameters() uses; false when `to` is not below `from`.
bool path_below(const Module& from, const Module* to, std::string& path) {
  for (const auto& [name, child] : from.children()) {
    std::string rest;
    if (child.get() == to || path_below(*child, to, rest)) {
      path = rest.empty() ? name : name + "." + rest;
      return true;
    }
  }
  return false;
}
}  // namespace

void ModuleScope::enter(const Module* m) {
  entered_ = true;
  prev_module_ = t_module;
  prev_path_ = anomaly_module();
  std::string path;  // the outermost module is "" (the root of named_parameters)
  if (prev_module_ && prev_path_) {
    path = prev_path_;
    std::string below;
    if (m != prev_module_ && path_below(*prev_module_, m, below))
      path = path.empty() ? below : path + "." + below;
  }
  t_module = m;
  set_anomaly_module(intern_module_path(path));
}

void ModuleScope::leave() {
  t_module = prev_module_;
  set_anomaly_module(prev_path_);
}

}  // namespace qkv::nn
