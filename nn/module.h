// nn::Module: the base of every layer and model. A module owns parameters
// (leaf Vars that require grad) and child modules, both registered by name, so
// that a model's parameters have hierarchical names like PyTorch's:
//   encoder.layers.0.self_attn.w_q.weight
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/anomaly.h"
#include "autograd/var.h"
#include "nn/probe.h"

namespace qkv::nn {

// A parameter is a leaf Var that requires grad; the alias documents intent.
using Parameter = Var;

class Module {
 public:
  virtual ~Module() = default;

  // Every parameter with its dotted name, in registration order. A parameter
  // shared by two modules (tied weights) is listed once, under its first name.
  std::vector<std::pair<std::string, Var>> named_parameters() const;
  std::vector<Var> parameters() const;
  // Direct children, in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }
  int64_t num_parameters() const;  // total number of scalars

  void zero_grad();
  // Training mode (dropout active) or evaluation mode; applies to all children.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // The training instruments' probe (nn/probe.h) for this module and all its
  // children; nullptr (the default) turns it off.
  void set_probe(Probe* p);
  Probe* probe() const { return probe_; }

 protected:
  Parameter register_parameter(const std::string& name, Tensor init);
  // Registers an existing Var (e.g. a weight tied to another module's).
  Parameter register_parameter(const std::string& name, Var shared);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Var>>& out) const;
  std::vector<std::pair<std::string, Var>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  Probe* probe_ = nullptr;
};

// A module in evaluation mode for a scope, then back in the mode it had: a
// model's answers without a graph (`EvalModeGuard eval(model);`, as
// Bert::mlm_probabilities and generation/answer.cpp do).
class EvalModeGuard {
 public:
  explicit EvalModeGuard(Module& m) : m_(m), was_training_(m.is_training()) { m.eval(); }
  ~EvalModeGuard() { m_.train(was_training_); }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  Module& m_;
  bool was_training_;
};

// Opened as the first line of a module's forward: `ModuleScope scope(this);`.
// While detect-anomaly mode is on (autograd/anomaly.h) it tells the ops made
// inside which module made them: the dotted name named_parameters() gives the
// module, counted from the outermost module whose forward is running
// ("decoder.layers.0.ffn"). A module called by one that did not register it
// counts as its caller. When the mode is off it costs one test.
class ModuleScope {
 public:
  explicit ModuleScope(const Module* m) {
    if (detect_anomaly_enabled()) enter(m);
  }
  ~ModuleScope() {
    if (entered_) leave();
  }
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  void enter(const Module* m);
  void leave();
  bool entered_ = false;
  const Module* prev_module_ = nullptr;
  const char* prev_path_ = nullptr;
};

}  // namespace qkv::nn
