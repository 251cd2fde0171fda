// Detect-anomaly mode: find the first op that made a NaN or an Inf. Like
// PyTorch's torch.autograd.detect_anomaly, it is off by default and costs
// one thread-local test per op when off. When on, every op's output is
// checked as it is made (and the leaves it reads, before it ran), and during
// backward every gradient an op returns; the first non-finite value throws
// AnomalyError naming forward or backward, the op, its shapes, the input
// (for a gradient), the first bad element and the module the op was made in:
//
//   qkv::DetectAnomalyGuard anomaly;       // on within this scope
//   Var loss = ...; loss.backward();       // throws at the first NaN/Inf
//
// The module is the dotted path named_parameters() uses, e.g.
// "decoder.layers.0.ffn": each module's forward opens an nn::ModuleScope,
// which keeps the current path here while the mode is on. Like grad mode,
// the setting is per thread.
//
// A throw in backward leaves the gradients accumulated so far in .grad():
// zero them before training on.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "autograd/var.h"
#include "core/error.h"

namespace qkv {

class Node;

bool detect_anomaly_enabled();
void set_detect_anomaly(bool on);

// Turns detect-anomaly mode on (or off) within its scope, then restores the
// previous setting, so guards nest.
class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(bool on = true) : prev_(detect_anomaly_enabled()) {
    set_detect_anomaly(on);
  }
  ~DetectAnomalyGuard() { set_detect_anomaly(prev_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};

// What a tensor held: its shape, how many of its numbers are NaN, +Inf and
// -Inf, and the min, max, mean, std and largest |x| of its finite numbers
// (NaN when it has none). `freed`: an intermediate whose values were freed
// before backward read its node (run the forward in a RetainValuesGuard to
// keep them); only the shape is known.
struct TensorStats {
  Shape shape;
  bool freed = false;
  int64_t count = 0, nan = 0, pos_inf = 0, neg_inf = 0;
  double min = 0, max = 0, mean = 0, std = 0, max_abs = 0;
  bool finite() const { return nan == 0 && pos_inf == 0 && neg_inf == 0; }
};
// One pass over t, in double.
TensorStats tensor_stats(const Tensor& t);

// One tensor around the op that made the anomaly, for a report: its role
// ("input 0" followed by the input's Var::name() in brackets or by ", made
// by" and the op that made it; "output", "gradient of the output",
// "gradient for input 1") and what it held.
struct AnomalyOperand {
  std::string role;
  TensorStats stats;
};

// What detect-anomaly mode throws. The message says it all; the fields are
// for programs that act on it (a trainer that stops and reports, a test).
// `operands` and the op's rules are filled when the error is made, so only a
// step that throws pays for them.
class AnomalyError : public Error {
 public:
  AnomalyError(const std::string& what, bool backward, std::string op, std::string module,
               int input)
      : Error(what),
        backward(backward),
        op(std::move(op)),
        module(std::move(module)),
        input(input) {}
  bool backward;       // found in a gradient (else in a forward value)
  std::string op;      // Node::name() of the op
  std::string module;  // where the op was made: "decoder.layers.0.ffn"; "" for the
                       // top-level module or outside any (the message says which)
  int input;           // the input whose gradient (backward) or leaf value (forward)
                       // was bad; -1 for an op's forward output
  // Forward: each input's values, then the output. Backward: each input's
  // values (freed intermediates say so), the gradient of the output the op
  // was given, and the gradient it returned for `input` (with `summed`, the
  // sum with the variable's other uses). Empty for backward()'s own gradient.
  std::vector<AnomalyOperand> operands;
  // The op's Node::doc(), copied: its forward, its backward rule and the docs/
  // page deriving it; empty for an op that gives none (one written outside
  // the library may).
  std::string forward_rule, backward_rule, page;
};

// The flat index of the first NaN or Inf in t, or -1 when all are finite.
int64_t first_non_finite(const Tensor& t);

// ---- hooks (called by make_result, the engine and nn::ModuleScope) ----------------

// Forward: throws when a leaf among `inputs` or the output `out` of `node`
// holds a NaN or Inf. Called by make_result when the mode is on.
void check_forward_anomaly(const Tensor& out, const Node* node, const VarList& inputs);

// Backward: throws when `grad`, the gradient flowing into input i of `node`,
// holds a NaN or Inf. `summed` says it is the sum of this op's gradient and
// those from the variable's other uses (the sum itself overflowed).
// `grad_out` (when given) is the gradient of the output the node's backward
// was given, kept in the error's operands.
void check_backward_anomaly(const Tensor& grad, const Node& node, size_t i, bool summed = false,
                            const Tensor* grad_out = nullptr);

// Backward: throws when the gradient passed to backward() holds a NaN or Inf.
void check_root_gradient_anomaly(const Tensor& grad);

// The path of the module whose forward is running on this thread, as
// recorded by nn::ModuleScope: null outside any module. Ops made while the
// mode is on keep it in Node::module.
const char* anomaly_module();
void set_anomaly_module(const char* path);
// A lasting copy of a module path (one per distinct path, kept for the life
// of the program), so nodes can point at it without a string per op.
const char* intern_module_path(const std::string& path);

}  // namespace qkv
