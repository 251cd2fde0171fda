#include "autograd/anomaly.h"

#include <cmath>
#include <limits>
#include <mutex>
#include <unordered_set>

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

[[noreturn]] void fail(const std::string& what, bool backward, const char* op, const char* module,
                       int input) {
  throw AnomalyError("detect_anomaly: " + what, backward, op, module ? module : "", input);
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
           false, op, module, static_cast<int>(i));
  }
  const int64_t bad = first_non_finite(out);
  if (bad >= 0)
    fail(std::string("forward of ") + op + " produced " + describe_element(out, bad) +
             " in its output " + to_string(out.shape()) + "; inputs " + input_shapes(inputs) +
             "; " + where(module),
         false, op, module, -1);
}

void check_backward_anomaly(const Tensor& grad, const Node& node, size_t i, bool summed) {
  const int64_t bad = first_non_finite(grad);
  if (bad < 0) return;
  const std::string what =
      summed ? "the gradient " + to_string(grad.shape()) + " " + node.name() + " gave its input " +
                   std::to_string(i) + " overflowed to " + describe_element(grad, bad) +
                   " when summed with the gradients from that variable's other uses"
             : std::string("backward of ") + node.name() + " produced " +
                   describe_element(grad, bad) + " in the gradient " + to_string(grad.shape()) +
                   " for its input " + std::to_string(i);
  fail(what + "; inputs " + input_shapes(node.inputs) + ", output " + to_string(node.out_shape) +
           "; " + where(node.module),
       true, node.name(), node.module, static_cast<int>(i));
}

void check_root_gradient_anomaly(const Tensor& grad) {
  const int64_t bad = first_non_finite(grad);
  if (bad >= 0)
    fail("the gradient passed to backward() holds " + describe_element(grad, bad), true, "backward",
         nullptr, -1);
}

}  // namespace qkv
