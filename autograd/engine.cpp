#include "autograd/engine.h"

#include <string>
#include <utility>

#include "autograd/anomaly.h"
#include "autograd/node.h"
#include "core/elementwise.h"
#include "core/error.h"
#include "core/pool.h"

namespace qkv {

// The engine's containers (PoolSet, PoolVector, PoolMap) draw their blocks
// from the pool, as VarList does: every backward builds them anew, and in
// steady state that must not cost heap allocations.

VarList topological_order(const Var& root) {
  // Iterative depth-first search (deep graphs must not overflow the stack):
  // a variable is emitted after all the variables its op read.
  VarList order;
  PoolSet<VarImpl*> visited;
  PoolVector<std::pair<Var, size_t>> stack;  // (variable, next input to visit)
  stack.push_back({root, 0});
  visited.insert(root.impl());
  while (!stack.empty()) {
    auto& [v, next] = stack.back();
    const auto& fn = v.impl()->grad_fn;
    if (fn && next < fn->inputs.size()) {
      const Var& in = fn->inputs[next++];
      if (in.requires_grad() && visited.insert(in.impl()).second) stack.push_back({in, 0});
      continue;
    }
    order.push_back(v);
    stack.pop_back();
  }
  return order;
}

namespace {
// Adds g into a leaf's (or retaining non-leaf's) .grad. The first time, the
// gradient is copied: g may be shared with other tensors of the graph. A
// .grad of another shape than g (the variable's data was replaced by a tensor
// of a new shape since its last backward) is not added to but replaced.
void accumulate_into(VarImpl* v, const Tensor& g) {
  if (!v->grad.defined() || v->grad.shape() != g.shape())
    v->grad = g.clone();
  else
    v->grad.add_(g);
}
}  // namespace

void run_backward(const Var& root, const Tensor& grad, bool retain_graph) {
  check_defined(grad, "backward");
  if (!root.requires_grad())
    throw Error(
        "backward: this Var does not require grad and has no grad_fn "
        "(no input of the computation had requires_grad = true)");
  if (grad.shape() != root.shape())
    throw Error("backward: gradient of shape " + to_string(grad.shape()) +
                " does not match output of shape " + to_string(root.shape()));

  const bool anomaly = detect_anomaly_enabled();
  if (anomaly) check_root_gradient_anomaly(grad);
  const VarList order = topological_order(root);
  // Gradients flowing into each variable, summed over its uses.
  PoolMap<VarImpl*, Tensor> grads;
  grads.reserve(order.size() * 2);
  grads[root.impl()] = grad;

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    VarImpl* v = it->impl();
    auto found = grads.find(v);
    if (found == grads.end()) continue;
    Tensor g = std::move(found->second);
    grads.erase(found);
    if (!v->grad_fn) {  // a leaf
      if (v->requires_grad) accumulate_into(v, g);
      continue;
    }
    if (v->retains_grad) accumulate_into(v, g);
    Node& node = *v->grad_fn;
    if (node.released)
      throw Error(std::string("backward: trying to backward through ") + node.name() +
                  " a second time, but its saved tensors were freed by the first backward; "
                  "pass retain_graph = true to the first backward(grad, true)");
    TensorList in_grads = node.backward(g);
    if (in_grads.size() != node.inputs.size())
      throw Error(std::string("backward: ") + node.name() + " returned " +
                  std::to_string(in_grads.size()) + " gradients for " +
                  std::to_string(node.inputs.size()) + " inputs");
    for (size_t i = 0; i < in_grads.size(); ++i) {
      const Var& in = node.inputs[i];
      if (!in.requires_grad() || !in_grads[i].defined()) continue;
      if (in_grads[i].shape() != in.shape())
        throw Error(std::string("backward: ") + node.name() + " produced a gradient of shape " +
                    to_string(in_grads[i].shape()) + " for input " + std::to_string(i) +
                    " of shape " + to_string(in.shape()));
      if (anomaly) check_backward_anomaly(in_grads[i], node, i, false, &g);  // throws at a NaN/Inf
      if (!in.impl()->grad_fn) {
        // A leaf: add into its .grad() now rather than parking the gradient
        // until the leaf's turn (leaves come last), which would hold a second
        // copy of every parameter gradient at the peak of backward.
        accumulate_into(in.impl(), in_grads[i]);
        in_grads[i] = Tensor();
        continue;
      }
      Tensor& slot = grads[in.impl()];
      // Sum over uses. Out of place: the earlier gradient may be shared.
      const bool summed = slot.defined();
      slot = summed ? add(slot, in_grads[i]) : std::move(in_grads[i]);
      if (anomaly && summed) check_backward_anomaly(slot, node, i, /*summed=*/true, &g);
    }
    if (!retain_graph) {
      node.release_saved();
      node.released = true;
    }
  }
}

}  // namespace qkv
