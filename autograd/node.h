// qkv::Node: one recorded application of a differentiable op. It keeps its
// inputs (the graph's edges) and whatever its backward needs (saved tensors).
// Every op in qkv is a small struct deriving from Node, with the forward
// function written right beside it; see autograd/ops_*.cpp.
#pragma once
#include <memory>

#include "autograd/var.h"
#include "core/pool.h"

namespace qkv {

class Node {
 public:
  // Frees the inputs iteratively, so dropping a very deep graph does not
  // recurse Node -> Var -> Node ... once per op (see var.cpp).
  virtual ~Node();
  // The op's name, for error messages and graph dumps ("matmul", "layer_norm").
  virtual const char* name() const = 0;
  // Given dL/d(output), return dL/d(input i) for every input, in order. An
  // entry may be left undefined when needs_grad(i) is false.
  virtual TensorList backward(const Tensor& grad_out) = 0;
  // Frees what forward saved for backward. Called after backward unless the
  // graph is retained.
  virtual void release_saved() {}

  bool needs_grad(size_t i) const { return i < inputs.size() && inputs[i].requires_grad(); }

  // Stores the variables this op read as graph references (see var.h).
  void adopt_inputs(VarList in);

  // The variables this op read. Copy one to keep it (a copy is a counted
  // handle); moving out of this list would give an uncounted one.
  VarList inputs;
  Shape out_shape;          // the shape of the op's output (checked against grad_out)
  bool released = false;    // saved tensors already freed by a backward
  const char* module = nullptr;  // detect-anomaly mode only: the module that made it (anomaly.h)
};

// Makes an op's node. Like std::make_shared, but the node comes from the pool
// (core/pool.h): a graph makes one per op every step. (A node made with
// std::make_shared works just as well, only with a heap block.)
template <class T>
std::shared_ptr<T> make_node() {
  return make_pooled<T>();
}

// Makes the output Var of an op. When grad mode is on and some input requires
// grad, `node` is recorded (its inputs set) and the result requires grad;
// otherwise the result is a plain leaf and the node is dropped.
Var make_result(Tensor out, std::shared_ptr<Node> node, VarList inputs);

// True when an op applied to these inputs must record a node.
bool should_record(const VarList& inputs);

}  // namespace qkv
