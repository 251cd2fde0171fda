// qkv::Var: what users build graphs with. A Var is a core::Tensor (the
// numbers) plus a gradient plus the Node (function) that made it. Kernels
// compute numbers; the graph remembers how.
//
//   Var w(Tensor::normal({3, 2}, 0, 1), /*requires_grad=*/true);
//   Var loss = sum(relu(matmul(x, w)));
//   loss.backward();          // w.grad() now holds dloss/dw
//
// Like a PyTorch tensor, a Var is a handle: copies share the same variable.
//
// Memory: the graph remembers which variables each op read, but it does not
// keep their values alive. When the last handle you hold to an intermediate
// (a Var made by an op) goes away, its values are freed, as in PyTorch; the
// ops that need a value for backward have saved their own reference to it.
// The variable itself stays in the graph (its shape, grad_fn and, with
// retain_grad, its gradient). To read every intermediate's values later,
// walking the graph (as the step-through does), build the graph inside a
// RetainValuesGuard.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace qkv {

class Node;

struct VarImpl {
  Tensor data;  // undefined once an intermediate's values are freed
  Tensor grad;  // undefined until a backward reaches this variable
  bool requires_grad = false;
  bool retains_grad = false;      // non-leaves keep .grad only when asked (as in PyTorch)
  bool retains_values = false;    // made inside a RetainValuesGuard: data is never freed
  std::atomic<int> handles{0};    // Vars held outside the graph (the graph's own don't count)
  std::shared_ptr<Node> grad_fn;  // null for leaves
  std::string name;               // optional label, shown in graph dumps
};

class Var {
 public:
  Var() = default;
  explicit Var(Tensor data, bool requires_grad = false);
  // Handles are counted, so that an intermediate's values can be freed with
  // its last handle (see the top of this file).
  Var(const Var& o);
  Var(Var&& o) noexcept;
  Var& operator=(const Var& o);
  Var& operator=(Var&& o) noexcept;
  ~Var();

  bool defined() const { return impl_ != nullptr; }
  // Throws when the values of an intermediate were freed.
  const Tensor& data() const;
  Tensor& data();
  // The shape, also after the values were freed.
  const Shape& shape() const;
  int dim() const { return static_cast<int>(shape().size()); }
  int64_t size(int axis) const;
  int64_t numel() const { return qkv::numel(shape()); }
  real item() const { return data().item(); }

  // The accumulated gradient; undefined (check .defined()) before any backward.
  const Tensor& grad() const;
  bool requires_grad() const;
  // Leaves only: start or stop tracking this variable.
  Var& requires_grad_(bool on = true);
  // A leaf was made by the user, not by an op. Non-leaves have a grad_fn.
  bool is_leaf() const;
  const std::shared_ptr<Node>& grad_fn() const;
  // Ask a non-leaf to keep its gradient in .grad() during backward.
  Var& retain_grad();

  // Backpropagate from a one-element Var (dL/dL = 1).
  void backward();
  // Backpropagate with an explicit upstream gradient of this Var's shape. The
  // graph's saved tensors are freed unless retain_graph is true; a second
  // backward through a freed graph throws.
  void backward(const Tensor& grad, bool retain_graph = false);
  // Zero the gradient (keeps its buffer so training steps reuse memory).
  void zero_grad();
  // Drops the gradient buffer entirely.
  void clear_grad();

  // The same numbers, cut from the graph: a leaf that does not require grad.
  Var detach() const;

  Var& set_name(const std::string& name);
  const std::string& name() const;

  VarImpl* impl() const { return impl_.get(); }
  bool same_as(const Var& o) const { return impl_ == o.impl_; }

 private:
  friend class Node;  // a node turns the Vars it reads into graph references
  void swap(Var& o) noexcept;
  std::shared_ptr<VarImpl> impl_;
  bool graph_ref_ = false;  // held in a Node's inputs: not one of the user's handles
};

// A list of variables, e.g. an op's inputs. Its buffer comes from the pool
// (core/pool.h): graphs are rebuilt every step, and their lists with them.
using VarList = PoolVector<Var>;

// ---- grad mode ---------------------------------------------------------------
// Ops record nodes only while grad mode is on (the default, per thread).
bool grad_enabled();
void set_grad_enabled(bool on);

// Within its scope no op records a node (inference, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Within its scope every variable an op makes keeps its values for as long
// as the variable exists, held by a handle or only by the graph (for
// inspecting a graph after the fact). Costs the memory of every intermediate.
class RetainValuesGuard {
 public:
  RetainValuesGuard();
  ~RetainValuesGuard();
  RetainValuesGuard(const RetainValuesGuard&) = delete;
  RetainValuesGuard& operator=(const RetainValuesGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace qkv
