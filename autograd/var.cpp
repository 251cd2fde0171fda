#include "autograd/var.h"

#include "autograd/anomaly.h"
#include "autograd/engine.h"
#include "autograd/node.h"
#include "core/error.h"

namespace qkv {

Var::Var(Tensor data, bool requires_grad) : impl_(make_pooled<VarImpl>()) {
  check_defined(data, "Var");
  impl_->data = std::move(data);
  impl_->requires_grad = requires_grad;
  impl_->handles = 1;
}

// ---- handles --------------------------------------------------------------------
// A copy made by the user (including a copy of a graph reference, as a graph
// walk makes) counts as a handle. When the last one goes, an intermediate's
// values are dropped: the graph keeps the variable, not its numbers. Tensors
// share storage, so the ops that saved the same values still have them.
Var::Var(const Var& o) : impl_(o.impl_) {
  if (impl_) impl_->handles.fetch_add(1, std::memory_order_relaxed);
}
Var::Var(Var&& o) noexcept : impl_(std::move(o.impl_)), graph_ref_(o.graph_ref_) {
  o.graph_ref_ = false;
}
void Var::swap(Var& o) noexcept {
  std::swap(impl_, o.impl_);
  std::swap(graph_ref_, o.graph_ref_);
}
Var& Var::operator=(const Var& o) {
  Var copy(o);
  swap(copy);
  return *this;  // copy, now holding the old variable, lets go of it
}
Var& Var::operator=(Var&& o) noexcept {
  Var moved(std::move(o));
  swap(moved);
  return *this;
}
Var::~Var() {
  if (!impl_ || graph_ref_) return;
  if (impl_->handles.fetch_sub(1, std::memory_order_acq_rel) == 1 && impl_->grad_fn &&
      !impl_->retains_values)
    impl_->data = Tensor();
}

namespace {
VarImpl* checked(const std::shared_ptr<VarImpl>& p, const char* op) {
  if (!p) throw Error(std::string(op) + ": Var is undefined");
  return p.get();
}

VarImpl* with_values(const std::shared_ptr<VarImpl>& p) {
  VarImpl* v = checked(p, "data");
  if (!v->data.defined() && v->grad_fn)
    throw Error(std::string("data: the values of this ") + v->grad_fn->name() + " output " +
                to_string(v->grad_fn->out_shape) +
                " were freed when its last handle was dropped (the graph keeps variables, "
                "not their values); keep a Var of it, or build the graph inside a "
                "RetainValuesGuard");
  return v;
}
}  // namespace

const Tensor& Var::data() const { return with_values(impl_)->data; }
Tensor& Var::data() { return with_values(impl_)->data; }
const Shape& Var::shape() const {
  const VarImpl* v = checked(impl_, "shape");
  return v->data.defined() || !v->grad_fn ? v->data.shape() : v->grad_fn->out_shape;
}
int64_t Var::size(int axis) const {
  const Shape& s = shape();
  return s[normalize_axis(axis, static_cast<int>(s.size()), "Var::size", s)];
}
const Tensor& Var::grad() const { return checked(impl_, "grad")->grad; }
bool Var::requires_grad() const { return impl_ && impl_->requires_grad; }

Var& Var::requires_grad_(bool on) {
  checked(impl_, "requires_grad_");
  if (impl_->grad_fn && !on)
    throw Error("requires_grad_: cannot turn off tracking of a non-leaf (made by " +
                std::string(impl_->grad_fn ? "an op" : "") + "); use detach()");
  impl_->requires_grad = on;
  return *this;
}

bool Var::is_leaf() const { return checked(impl_, "is_leaf")->grad_fn == nullptr; }
const std::shared_ptr<Node>& Var::grad_fn() const { return checked(impl_, "grad_fn")->grad_fn; }

Var& Var::retain_grad() {
  checked(impl_, "retain_grad")->retains_grad = true;
  return *this;
}

void Var::backward() {
  checked(impl_, "backward");
  if (numel() != 1)
    throw Error("backward: output of shape " + to_string(shape()) +
                " is not a scalar; pass the upstream gradient: backward(grad)");
  backward(Tensor::ones(shape()));
}

void Var::backward(const Tensor& grad, bool retain_graph) {
  checked(impl_, "backward");
  run_backward(*this, grad, retain_graph);
}

void Var::zero_grad() {
  if (impl_ && impl_->grad.defined()) impl_->grad.zero_();
}
void Var::clear_grad() {
  if (impl_) impl_->grad = Tensor();
}

Var Var::detach() const { return Var(data(), false); }

Var& Var::set_name(const std::string& name) {
  checked(impl_, "set_name")->name = name;
  return *this;
}
const std::string& Var::name() const { return checked(impl_, "name")->name; }

// The Vars an op read become graph references, which are not handles: if the
// caller moved its last handle in, the values go now.
void Node::adopt_inputs(VarList in) {
  for (Var& v : in) {
    if (!v.graph_ref_) {
      Var counted(std::move(v));  // releases one handle when it goes out of scope...
      v.impl_ = counted.impl_;    // ...while v keeps the variable as a graph reference
      v.graph_ref_ = true;
    }
  }
  inputs = std::move(in);
}

// ---- tearing down a graph -----------------------------------------------------------
// Left to the default destructors, dropping the last handle of a chain of N ops
// would recurse Var -> Node -> Var ... N levels deep and overflow the stack
// (a 300000-op chain did). Instead a dying node moves its inputs onto a local
// stack; each input it held the last reference to gives up its own node, whose
// inputs join the stack. Every destructor that then runs has nothing left to
// recurse into.
Node::~Node() {
  VarList stack = std::move(inputs);
  while (!stack.empty()) {
    Var v = std::move(stack.back());
    stack.pop_back();
    VarImpl* p = v.impl();
    if (p && v.impl_.use_count() == 1 && p->grad_fn && p->grad_fn.use_count() == 1) {
      std::shared_ptr<Node> fn = std::move(p->grad_fn);
      for (Var& in : fn->inputs) stack.push_back(std::move(in));
      fn->inputs.clear();
    }  // fn (no inputs left) and then v (no grad_fn left) are destroyed here
  }
}

// ---- grad mode ----------------------------------------------------------------
namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_retain_values = false;
}  // namespace
bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }

RetainValuesGuard::RetainValuesGuard() : prev_(t_retain_values) { t_retain_values = true; }
RetainValuesGuard::~RetainValuesGuard() { t_retain_values = prev_; }

// ---- recording ------------------------------------------------------------------
bool should_record(const VarList& inputs) {
  if (!grad_enabled()) return false;
  for (const Var& v : inputs)
    if (v.requires_grad()) return true;
  return false;
}

Var make_result(Tensor out, std::shared_ptr<Node> node, VarList inputs) {
  const bool anomaly = detect_anomaly_enabled();
  if (anomaly) check_forward_anomaly(out, node.get(), inputs);  // throws at a NaN/Inf
  Var v(std::move(out), false);
  if (node && should_record(inputs)) {
    node->out_shape = v.shape();
    if (anomaly) node->module = anomaly_module();
    node->adopt_inputs(std::move(inputs));
    v.impl()->grad_fn = std::move(node);
    v.impl()->requires_grad = true;
    v.impl()->retains_values = t_retain_values;
  }
  return v;
}

}  // namespace qkv
