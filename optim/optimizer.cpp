#include "optim/optimizer.h"

#include <cmath>
#include <cstdio>
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
    if (!p.defined())
      throw Error(std::string(name_) + ": parameter " + std::to_string(i) + " is an undefined Var");
    if (!p.is_leaf())
      throw Error(std::string(name_) + ": parameter " + std::to_string(i) + " of shape " +
                  to_string(p.shape()) +
                  " is not a leaf (it was made by an op); "
                  "optimize the leaf it came from");
    for (size_t j = 0; j < i; ++j)
      if (params_[j].same_as(p))
        throw Error(std::string(name_) + ": parameters " + std::to_string(j) + " and " +
                    std::to_string(i) + " are the same Var; list each parameter once");
  }
  check_hyper(std::isfinite(lr) && lr >= 0, name_, "lr", "finite and >= 0", lr);
  param_steps_.assign(params_.size(), 0);
}

void Optimizer::set_weight_decay_mask(std::vector<bool> decayed) {
  if (decayed.size() != params_.size())
    throw Error(std::string(name_) + ": a weight decay mask of " + std::to_string(decayed.size()) +
                " entries for " + std::to_string(params_.size()) + " parameters");
  decay_mask_ = std::move(decayed);
}

void Optimizer::zero_grad() {
  for (Var& p : params_) p.zero_grad();
}

int Optimizer::add_state(const char* name, bool non_negative) {
  state_.emplace_back(name, std::vector<Tensor>(params_.size()));
  non_negative_.push_back(non_negative);
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

// load_state_dict's reading half: every entry of a state dict checked and
// gathered into local copies, so that a bad dict changes nothing. Errors
// name the entry: "<opt>.load_state_dict: entry "<name>": <why>".
class StateDictReader {
  // The optimizer's side (declared first: the public members below are sized by n_).
  std::string where_;
  const char* opt_;
  const std::vector<Var>& params_;
  std::vector<const char*> kinds_;  // the rule's buffer names, e.g. "exp_avg"
  std::vector<bool> non_negative_;  // per kind: its values are never negative
  size_t n_;                        // parameters

 public:
  StateDictReader(const char* opt, const std::vector<Var>& params, std::vector<const char*> kinds,
                  std::vector<bool> non_negative)
      : where_(std::string(opt) + ".load_state_dict: "),
        opt_(opt),
        params_(params),
        kinds_(std::move(kinds)),
        non_negative_(std::move(non_negative)),
        n_(params.size()),
        param_steps(n_, 0),
        buffers(kinds_.size(), std::vector<Tensor>(n_)),
        present_(kinds_.size(), 0) {}

  void read(const std::string& name, const Tensor& t) {
    if (!t.defined()) fail(name, "tensor is undefined");
    if (name == "step") return read_step(name, t);
    if (name == "param_steps") return read_param_steps(name, t);
    read_buffer(name, t);
  }

  // After every entry: the counts are there, and the buffers are
  // all-or-nothing (none at all, saved before the first step, or every kind
  // for every parameter).
  void check_complete() const {
    if (!have_step_) throw Error(where_ + "missing entry \"step\"");
    if (!have_param_steps_) throw Error(where_ + "missing entry \"param_steps\"");
    for (size_t k = 0; k < kinds_.size() && any_buffers(); ++k)
      for (size_t i = 0; i < n_; ++i)
        if (!buffers[k][i].defined())
          throw Error(where_ + "missing entry \"" + kinds_[k] + "." + std::to_string(i) +
                      "\" (the dict has " + std::to_string(present_[k]) + " of " +
                      std::to_string(n_) + " \"" + kinds_[k] + ".<i>\" entries)");
    if (!any_buffers() && !kinds_.empty())
      for (size_t i = 0; i < n_; ++i)
        if (param_steps[i] != 0)
          throw Error(where_ + "entry \"param_steps\": parameter " + std::to_string(i) +
                      " has had " + std::to_string(param_steps[i]) +
                      " updates but the dict has no \"" + kinds_[0] + ".<i>\" entries");
  }

  bool any_buffers() const {
    for (size_t c : present_)
      if (c > 0) return true;
    return false;
  }

  int64_t step_count = 0;
  std::vector<int64_t> param_steps;          // (N)
  std::vector<std::vector<Tensor>> buffers;  // [kind][parameter], shared with the dict

 private:
  [[noreturn]] void fail(const std::string& entry, const std::string& why) const {
    throw Error(where_ + "entry \"" + brief(entry) + "\": " + why);
  }

  // "step": one count.
  void read_step(const std::string& name, const Tensor& t) {
    if (have_step_) fail(name, "appears twice");
    if (t.numel() != 1) fail(name, "expected 1 element, got shape " + to_string(t.shape()));
    if (!is_count(t.item(), 0))
      fail(name, "expected a step count, got " + std::to_string(t.item()));
    step_count = static_cast<int64_t>(t.item());
    have_step_ = true;
  }

  // "param_steps": one count per parameter.
  void read_param_steps(const std::string& name, const Tensor& t) {
    if (have_param_steps_) fail(name, "appears twice");
    if (t.shape() != Shape{static_cast<int64_t>(n_)})
      fail(name, "shape " + to_string(t.shape()) + ", but this optimizer has " +
                     std::to_string(n_) + " parameters (expected (" + std::to_string(n_) + "))");
    const real* v = t.data();
    for (size_t i = 0; i < n_; ++i) {
      if (!is_count(v[i], 0))
        fail(name,
             "element " + std::to_string(i) + " is not a step count: " + std::to_string(v[i]));
      param_steps[i] = static_cast<int64_t>(v[i]);
    }
    have_param_steps_ = true;
  }

  // "<kind>.<i>": buffer `kind` of parameter i, of that parameter's shape.
  void read_buffer(const std::string& name, const Tensor& t) {
    const size_t dot = name.rfind('.');
    int k = -1;
    size_t i = 0;
    if (dot != std::string::npos)
      for (size_t j = 0; j < kinds_.size(); ++j)
        if (name.compare(0, dot, kinds_[j]) == 0 && std::strlen(kinds_[j]) == dot)
          k = static_cast<int>(j);
    if (k < 0 || !parse_index(name.substr(dot + 1), i)) {
      std::string known = "\"step\", \"param_steps\"";
      for (const char* kind : kinds_) known += std::string(", \"") + kind + ".<i>\"";
      fail(name, std::string("unknown name; ") + opt_ + " state has " + known);
    }
    if (i >= n_)
      fail(name, "parameter index " + std::to_string(i) + " out of range: this optimizer has " +
                     std::to_string(n_) + " parameters");
    if (buffers[k][i].defined()) fail(name, "appears twice");
    if (t.shape() != params_[i].shape())
      fail(name, "shape " + to_string(t.shape()) + " != parameter " + std::to_string(i) +
                     " shape " + to_string(params_[i].shape()));
    if (non_negative_[k]) check_non_negative(name, kinds_[k], t);
    buffers[k][i] = t;
    ++present_[k];
  }

  // A buffer the rule keeps >= 0: the first negative element, named.
  void check_non_negative(const std::string& name, const char* kind, const Tensor& t) const {
    const real* v = t.data();
    int64_t first = -1, negative = 0;
    for (int64_t j = 0; j < t.numel(); ++j)
      if (v[j] < 0) {
        if (first < 0) first = j;
        ++negative;
      }
    if (negative == 0) return;
    // The flat index as a multi-index, e.g. 5 in (2,3) -> (1,2).
    const Shape& shape = t.shape();
    Shape at(shape.size());
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1, rest = first; d >= 0; --d) {
      at[d] = rest % shape[d];
      rest /= shape[d];
    }
    char value[32];
    std::snprintf(value, sizeof value, "%.9g", static_cast<double>(v[first]));
    fail(name, std::string("holds ") + value + " at index " + to_string(at) + " of shape " +
                   to_string(shape) + " (" + std::to_string(negative) + " negative value" +
                   (negative == 1 ? "" : "s") + " in it); " + opt_ + "'s \"" + kind +
                   "\" is never negative");
  }

  bool have_step_ = false, have_param_steps_ = false;
  std::vector<size_t> present_;  // entries read per kind
};

}  // namespace

void Optimizer::load_state_dict(const NamedTensors& state) {
  std::vector<const char*> kinds;
  for (const auto& kind : state_) kinds.push_back(kind.first);
  StateDictReader dict(name_, params_, kinds, non_negative_);
  for (const auto& [name, t] : state) dict.read(name, t);
  dict.check_complete();

  // Commit: copy the numbers (the optimizer must not share storage with the dict).
  step_count_ = dict.step_count;
  param_steps_ = dict.param_steps;
  allocated_ = dict.any_buffers();
  for (size_t k = 0; k < state_.size(); ++k)
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor& dst = state_[k].second[i];
      if (!allocated_) {
        dst = Tensor();
        continue;
      }
      if (!dst.defined() || dst.shape() != params_[i].shape())
        dst = Tensor::empty(params_[i].shape());
      dst.copy_(dict.buffers[k][i]);
    }
}

}  // namespace qkv::optim
