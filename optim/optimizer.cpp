#include "optim/optimizer.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace qkv::optim {

void check_hyper(bool ok, const char* opt, const char* what, const char* rule, double value) {
  if (ok) return;
  std::ostringstream os;
  os << opt << ": " << what << " must be " << rule << ", got " << value;
  throw Error(os.str());
}

Optimizer::Optimizer(std::vector<Var> params, real lr_, const char* name)
    : lr(lr_), params_(std::move(params)), name_(name) {
  if (params_.empty()) throw Error(std::string(name_) + ": got an empty parameter list");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Var& p = params_[i];
    if (!p.defined()) throw Error(std::string(name_) + ": parameter " + std::to_string(i) +
                                  " is an undefined Var");
    if (!p.is_leaf())
      throw Error(std::string(name_) + ": parameter " + std::to_string(i) + " of shape " +
                  to_string(p.shape()) + " is not a leaf (it was made by an op); "
                  "optimize the leaf it came from");
    for (size_t j = 0; j < i; ++j)
      if (params_[j].same_as(p))
        throw Error(std::string(name_) + ": parameters " + std::to_string(j) + " and " +
                    std::to_string(i) + " are the same Var; list each parameter once");
  }
  check_hyper(std::isfinite(lr) && lr >= 0, name_, "lr", "finite and >= 0", lr);
  param_steps_.assign(params_.size(), 0);
}

void Optimizer::zero_grad() {
  for (Var& p : params_) p.zero_grad();
}

int Optimizer::add_state(const char* name) {
  state_.emplace_back(name, std::vector<Tensor>(params_.size()));
  return static_cast<int>(state_.size()) - 1;
}

void Optimizer::begin_step() {
  check_hyper(std::isfinite(lr) && lr >= 0, name_, "lr", "finite and >= 0", lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& g = params_[i].grad();
    if (g.defined() && g.shape() != params_[i].shape())
      throw Error(std::string(name_) + ".step: parameter " + std::to_string(i) + " of shape " +
                  to_string(params_[i].shape()) + " has a gradient of shape " +
                  to_string(g.shape()));
    // A parameter's data replaced by one of another size would make the
    // state loops run off the end of the buffers.
    if (allocated_)
      for (const auto& kind : state_)
        if (kind.second[i].shape() != params_[i].shape())
          throw Error(std::string(name_) + ".step: parameter " + std::to_string(i) +
                      " now has shape " + to_string(params_[i].shape()) + " but its state \"" +
                      kind.first + "\" has shape " + to_string(kind.second[i].shape()));
  }
  if (allocated_) return;
  for (auto& kind : state_)
    for (size_t i = 0; i < params_.size(); ++i) kind.second[i] = Tensor::zeros(params_[i].shape());
  allocated_ = true;
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  out.emplace_back("step", Tensor::from_vector({static_cast<real>(step_count_)}));
  std::vector<real> steps(param_steps_.begin(), param_steps_.end());
  out.emplace_back("param_steps", Tensor::from_vector(steps));
  if (!allocated_) return out;
  for (const auto& kind : state_)
    for (size_t i = 0; i < params_.size(); ++i)
      out.emplace_back(std::string(kind.first) + "." + std::to_string(i), kind.second[i].clone());
  return out;
}

namespace {

// A count stored as a real: finite, integral, in [lo, 2^53].
bool is_count(real v, real lo) {
  return std::isfinite(v) && v >= lo && v == std::floor(v) && double(v) <= 9007199254740992.0;
}

// Parses "<digits>" into i; false on anything else (signs, spaces, overflow).
bool parse_index(const std::string& s, size_t& i) {
  if (s.empty() || s.size() > 18) return false;
  i = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    i = i * 10 + static_cast<size_t>(c - '0');
  }
  return true;
}

}  // namespace

void Optimizer::load_state_dict(const NamedTensors& state) {
  const std::string where = std::string(name_) + ".load_state_dict: ";
  const size_t n = params_.size();
  auto fail = [&](const std::string& entry, const std::string& why) {
    throw Error(where + "entry \"" + entry + "\": " + why);
  };

  // Validate everything into local copies first, so a bad dict changes nothing.
  bool have_step = false, have_param_steps = false;
  int64_t step_count = 0;
  std::vector<int64_t> param_steps(n, 0);
  std::vector<std::vector<Tensor>> loaded(state_.size(), std::vector<Tensor>(n));
  std::vector<size_t> present(state_.size(), 0);

  for (const auto& [name, t] : state) {
    if (!t.defined()) fail(name, "tensor is undefined");
    if (name == "step") {
      if (have_step) fail(name, "appears twice");
      if (t.numel() != 1) fail(name, "expected 1 element, got shape " + to_string(t.shape()));
      if (!is_count(t.item(), 0)) fail(name, "expected a step count, got " + std::to_string(t.item()));
      step_count = static_cast<int64_t>(t.item());
      have_step = true;
      continue;
    }
    if (name == "param_steps") {
      if (have_param_steps) fail(name, "appears twice");
      if (t.shape() != Shape{static_cast<int64_t>(n)})
        fail(name, "shape " + to_string(t.shape()) + ", but this optimizer has " +
                       std::to_string(n) + " parameters (expected (" + std::to_string(n) + "))");
      const real* v = t.data();
      for (size_t i = 0; i < n; ++i) {
        if (!is_count(v[i], 0))
          fail(name, "element " + std::to_string(i) + " is not a step count: " +
                         std::to_string(v[i]));
        param_steps[i] = static_cast<int64_t>(v[i]);
      }
      have_param_steps = true;
      continue;
    }
    // "<kind>.<i>"
    const size_t dot = name.rfind('.');
    int k = -1;
    size_t i = 0;
    if (dot != std::string::npos)
      for (size_t j = 0; j < state_.size(); ++j)
        if (name.compare(0, dot, state_[j].first) == 0 && std::strlen(state_[j].first) == dot)
          k = static_cast<int>(j);
    if (k < 0 || !parse_index(name.substr(dot + 1), i)) {
      std::string known = "\"step\", \"param_steps\"";
      for (const auto& kind : state_) known += std::string(", \"") + kind.first + ".<i>\"";
      fail(name, std::string("unknown name; ") + name_ + " state has " + known);
    }
    if (i >= n)
      fail(name, "parameter index " + std::to_string(i) + " out of range: this optimizer has " +
                     std::to_string(n) + " parameters");
    if (loaded[k][i].defined()) fail(name, "appears twice");
    if (t.shape() != params_[i].shape())
      fail(name, "shape " + to_string(t.shape()) + " != parameter " + std::to_string(i) +
                     " shape " + to_string(params_[i].shape()));
    loaded[k][i] = t;
    ++present[k];
  }
  if (!have_step) throw Error(where + "missing entry \"step\"");
  if (!have_param_steps) throw Error(where + "missing entry \"param_steps\"");
  // All-or-nothing: either no buffers at all (saved before the first step) or
  // every kind for every parameter.
  size_t total = 0;
  for (size_t c : present) total += c;
  const bool any = total > 0;
  for (size_t k = 0; k < state_.size() && any; ++k)
    for (size_t i = 0; i < n; ++i)
      if (!loaded[k][i].defined())
        throw Error(where + "missing entry \"" + state_[k].first + "." + std::to_string(i) +
                    "\" (the dict has " + std::to_string(present[k]) + " of " +
                    std::to_string(n) + " \"" + state_[k].first + ".<i>\" entries)");

  if (!any && !state_.empty())
    for (size_t i = 0; i < n; ++i)
      if (param_steps[i] != 0)
        throw Error(where + "entry \"param_steps\": parameter " + std::to_string(i) +
                    " has had " + std::to_string(param_steps[i]) + " updates but the dict has no \"" +
                    state_[0].first + ".<i>\" entries");

  // Commit: copy the numbers (the optimizer must not share storage with the dict).
  step_count_ = step_count;
  param_steps_ = param_steps;
  if (any) {
    for (size_t k = 0; k < state_.size(); ++k)
      for (size_t i = 0; i < n; ++i) {
        Tensor& dst = state_[k].second[i];
        if (!dst.defined() || dst.shape() != params_[i].shape())
          dst = Tensor::empty(params_[i].shape());
        dst.copy_(loaded[k][i]);
      }
  } else {
    for (auto& kind : state_)
      for (Tensor& b : kind.second) b = Tensor();
  }
  allocated_ = any;
}

}  // namespace qkv::optim
