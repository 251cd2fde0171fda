// The backward engine: reverse-mode accumulation over the recorded graph.
#pragma once
#include "autograd/var.h"

namespace qkv {

// Runs backward from `root` with upstream gradient `grad` (root's shape):
// visits nodes in reverse topological order, calls each node's backward,
// sums gradients arriving at a variable from several uses, and accumulates
// into .grad() of leaves that require grad (and of non-leaves that asked).
void run_backward(const Var& root, const Tensor& grad, bool retain_graph);

// Every variable reachable from root through recorded nodes, inputs before the
// ops that use them (a topological order).
VarList topological_order(const Var& root);

}  // namespace qkv
