#include "autograd/anomaly.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "autograd/node.h"

namespace qkv {

namespace {
thread_local bool t_anomaly = false;
thread_local const char* t_module = nullptr;  // set by nn::ModuleScope while the mode is on
}  // namespace

bool detect_anomaly_enabled() { return t_anomaly; }
void set_detect_anomaly(bool on) { t_anomaly = on; }

const char* anomaly_module() { return t_module; }
void set_anomaly_module(const char* path) { t_module = path; }

const char* intern_module_path(const std::string& path) {
  // Nodes of an unordered_set never move, so the pointers stay valid.
  static std::mutex mu;
  static std::unordered_set<std::string> paths;
  std::lock_guard<std::mutex> lock(mu);
  return paths.insert(path).first->c_str();
}

int64_t first_non_finite(const Tensor& t) {
  const real* p = t.data();
  const real big = std::numeric_limits<real>::max();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!(std::fabs(p[i]) <= big)) return i;  // false for NaN and for +-Inf
  return -1;
}

TensorStats tensor_stats(const Tensor& t) {
  TensorStats st;
  st.shape = t.shape();
  st.count = t.numel();
  const real* p = t.data();
  double lo = 0, hi = 0, sum = 0, sum2 = 0, big = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < st.count; ++i) {
    const double x = double(p[i]);
    if (std::isnan(x)) {
      ++st.nan;
    } else if (std::isinf(x)) {
      ++(x > 0 ? st.pos_inf : st.neg_inf);
    } else {
      lo = n ? std::min(lo, x) : x;
      hi = n ? std::max(hi, x) : x;
      big = std::max(big, std::fabs(x));
      sum += x;
      sum2 += x * x;
      ++n;
    }
  }
  const double none = std::numeric_limits<double>::quiet_NaN();
  st.min = n ? lo : none;
  st.max = n ? hi : none;
  st.max_abs = n ? big : none;
  st.mean = n ? sum / double(n) : none;
  // Population std; the sum of squares can overflow even a double only past
  // 1e154 per element, which float32 numbers never reach.
  st.std = n ? std::sqrt(std::max(0.0, sum2 / double(n) - st.mean * st.mean)) : none;
  return st;
}

namespace {

// "nan at [1,2] (flat index 5)"
std::string describe_element(const Tensor& t, int64_t flat) {
  const real x = t.data()[flat];
  std::string s = std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf");
  if (t.dim() == 0) return s;
  std::string idx;
  int64_t rest = flat;
  const Shape& sh = t.shape();
  for (int d = t.dim() - 1; d >= 0; --d) {
    idx = std::to_string(rest % sh[d]) + (idx.empty() ? "" : ",") + idx;
    rest /= sh[d];
  }
  return s + " at [" + idx + "] (flat index " + std::to_string(flat) + ")";
}

std::string input_shapes(const VarList& inputs) {
  std::string s;
  for (const Var& v : inputs) s += (s.empty() ? "" : ", ") + to_string(v.shape());
  return s.empty() ? "none" : s;
}

std::string where(const char* module) {
  if (!module) return "made outside any module";
  if (!*module) return "made in the top-level module";
  return std::string("made in module ") + module;
}

// The values of an op's inputs, "input i" each, with the input's name
// (Var::name) or the op that made it; an intermediate whose values were
// freed has its shape only.
std::vector<AnomalyOperand> input_operands(const VarList& inputs) {
  std::vector<AnomalyOperand> ops;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Var& in = inputs[i];
    if (!in.defined()) continue;
    // "input 2 (w_q.weight)" for a named leaf; "input 0, made by add_layer_norm"
    std::string role = "input " + std::to_string(i);
    if (!in.name().empty())
      role += " (" + in.name() + ")";
    else if (in.grad_fn())
      role += std::string(", made by ") + in.grad_fn()->name();
    AnomalyOperand o{role, {}};
    if (in.impl()->data.defined()) {
      o.stats = tensor_stats(in.impl()->data);
    } else {
      o.stats.shape = in.shape();
      o.stats.count = in.numel();
      o.stats.freed = true;
    }
    ops.push_back(std::move(o));
  }
  return ops;
}

[[noreturn]] void fail(const std::string& what, bool backward, const Node* node, const char* op,
                       const char* module, int input, std::vector<AnomalyOperand> operands) {
  AnomalyError e("detect_anomaly: " + what, backward, op, module ? module : "", input);
  e.operands = std::move(operands);
  if (node) {
    const OpDoc d = node->doc();
    e.forward_rule = d.forward ? d.forward : "";
    e.backward_rule = d.backward ? d.backward : "";
    e.page = d.page ? d.page : "";
  }
  throw e;
}

// The operands of a forward anomaly: the inputs, then the output.
std::vector<AnomalyOperand> forward_operands(const VarList& inputs, const Tensor& out) {
  std::vector<AnomalyOperand> ops = input_operands(inputs);
  ops.push_back({"output", tensor_stats(out)});
  return ops;
}

}  // namespace

void check_forward_anomaly(const Tensor& out, const Node* node, const VarList& inputs) {
  const char* op = node ? node->name() : "an op";
  const char* module = anomaly_module();
  // A leaf holding a NaN before the op ran: report the leaf, not the op.
  // (Inputs made by ops were checked when they were made.)
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Var& in = inputs[i];
    if (!in.defined() || !in.is_leaf()) continue;
    const int64_t bad = first_non_finite(in.data());
    if (bad >= 0)
      fail(std::string("input ") + std::to_string(i) + " of " + op + ", a leaf " +
               to_string(in.shape()) + ", holds " + describe_element(in.data(), bad) +
               " before the op ran; inputs " + input_shapes(inputs) + "; " + where(module),
           false, node, op, module, static_cast<int>(i), forward_operands(inputs, out));
  }
  const int64_t bad = first_non_finite(out);
  if (bad >= 0)
    fail(std::string("forward of ") + op + " produced " + describe_element(out, bad) +
             " in its output " + to_string(out.shape()) + "; inputs " + input_shapes(inputs) +
             "; " + where(module),
         false, node, op, module, -1, forward_operands(inputs, out));
}

void check_backward_anomaly(const Tensor& grad, const Node& node, size_t i, bool summed,
                            const Tensor* grad_out) {
  const int64_t bad = first_non_finite(grad);
  if (bad < 0) return;
  const std::string what =
      summed ? "the gradient " + to_string(grad.shape()) + " " + node.name() + " gave its input " +
                   std::to_string(i) + " overflowed to " + describe_element(grad, bad) +
                   " when summed with the gradients from that variable's other uses"
             : std::string("backward of ") + node.name() + " produced " +
                   describe_element(grad, bad) + " in the gradient " + to_string(grad.shape()) +
                   " for its input " + std::to_string(i);
  std::vector<AnomalyOperand> operands = input_operands(node.inputs);
  if (grad_out) operands.push_back({"gradient of the output", tensor_stats(*grad_out)});
  operands.push_back(
      {(summed ? "summed gradient for input " : "gradient for input ") + std::to_string(i),
       tensor_stats(grad)});
  fail(what + "; inputs " + input_shapes(node.inputs) + ", output " + to_string(node.out_shape) +
           "; " + where(node.module),
       true, &node, node.name(), node.module, static_cast<int>(i), std::move(operands));
}

void check_root_gradient_anomaly(const Tensor& grad) {
  const int64_t bad = first_non_finite(grad);
  if (bad >= 0)
    fail("the gradient passed to backward() holds " + describe_element(grad, bad), true, nullptr,
         "backward", nullptr, -1, {{"gradient passed to backward()", tensor_stats(grad)}});
}

}  // namespace qkv
