// qkv::Node: one recorded application of a differentiable op. It keeps its
// inputs (the graph's edges) and whatever its backward needs (saved tensors).
// Every op in qkv is a small struct deriving from Node, with the forward
// function written right beside it; see autograd/ops_*.cpp, and
// examples/custom_op.h for one written outside the library.
//
// The op contract. An op is a function on Vars plus a Node subclass:
//
//   struct ScaleNode : Node {                  // y = a * s
//     real s = 1;
//     const char* name() const override { return "scale"; }
//     TensorList backward(const Tensor& g) override { return {mul(g, s)}; }  // dy/da = s
//   };
//   Var scale(const Var& a, real s) {
//     auto n = make_node<ScaleNode>();         // check inputs and throw before this
//     n->s = s;
//     return make_result(mul(a.data(), s), n, {a});
//   }
//
// Forward (the function). Read the inputs' values with .data(), check shapes
// and throw qkv::Error naming the op and the shapes, compute the output
// tensor, save on the node whatever backward will need, and return
// make_result(output, node, {inputs...}). make_result records the node (sets
// its inputs, in that order, and out_shape, and makes it the output's
// grad_fn) only when grad mode is on for this thread and some input requires
// grad; otherwise the node and everything saved on it are dropped. Saving
// unconditionally is fine when it is cheap (Tensors are shared handles);
// test should_record(inputs) first to skip saving work that costs.
//
// What to save. Save Tensors (a copy of a Tensor shares its storage; no
// numbers are copied): inputs' values, the output, or statistics forward
// computed anyway (LayerNorm saves mean and rstd per row). Backward must not
// read inputs[i].data(): the graph keeps variables, not their values, and an
// intermediate's values are freed when the user's last Var of it goes (see
// autograd/var.h); a saved Tensor keeps its storage alive. inputs[i].shape()
// stays available. Save what is needed and no more: everything saved is held
// until this node's backward has run. There are no version counters: if the
// storage of a saved tensor is changed in place before backward (say, an
// optimizer step on a parameter), backward silently sees the new numbers.
//
// backward(grad_out). The engine calls it at most once per backward pass (not
// at all when no gradient reaches the output), after every use of the output
// has contributed: grad_out is dL/d(output), summed over those uses, in the
// output's shape (out_shape). It may share storage with other tensors of the
// pass: never modify it in place (returning it, or a reshape of it, is fine).
// Return exactly one Tensor per input, in the order given to make_result,
// each of that input's shape (the engine checks the count and the shapes and
// throws naming the op). An entry may be left undefined (Tensor()): the
// engine reads that as a zero gradient and adds nothing. Do so when
// needs_grad(i) is false (the engine ignores entries for such inputs anyway,
// so skip their work), or when the op sends input i nothing: self-attention
// gets one Var as both inputs and returns all of dx for the first. The
// engine sums the gradients of an input used several times and adds leaves'
// gradients into .grad(). Backward may throw qkv::Error; the exception
// leaves loss.backward().
//
// release_saved(). After a node's backward, unless backward(grad, true)
// retained the graph, the engine calls release_saved() and marks the node
// released; a second backward through it then throws. Reset every saved
// Tensor there, so that memory returns as backward proceeds instead of when
// the whole graph is dropped.
//
// Threads. Backward runs on the thread that called Var::backward. Forward and
// backward may use parallel_for (core/parallel.h; its function must not
// throw), which runs on the calling thread alone when called inside an outer
// parallel region. Separate graphs may be built and differentiated on
// different threads at the same time (grad mode is per thread, handle counts
// are atomic, the tensor allocator and the pool are locked), provided no two
// of them accumulate into the same leaf's .grad(). For that to hold, a node
// keeps its state in its own members: no static or global mutable state.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/var.h"
#include "core/pool.h"

namespace qkv {

// An op's maths as data, for learners and tools (the gradient explorer,
// explorer/trace.h, shows it on every node; tests/test_explorer.cpp checks
// that every Node type of the library gives one). One line each, in the
// names of docs/symbols.md, dA = dL/dA:
//   forward   "C = A B"
//   backward  "dA = dC B^T,  dB = A^T dC"   (the derivation the op implements)
//   page      "docs/matrix-rule.md"         (the page that derives it)
struct OpDoc {
  const char* forward = "";
  const char* backward = "";
  const char* page = "";
};

class Node {
 public:
  // Frees the inputs iteratively, so dropping a very deep graph does not
  // recurse Node -> Var -> Node ... once per op (see var.cpp).
  virtual ~Node();
  // The op's name, for error messages and graph dumps ("matmul", "layer_norm").
  virtual const char* name() const = 0;
  // Given dL/d(output) (out_shape; do not modify it), return dL/d(input i)
  // for every input, in order, each of input i's shape. An undefined entry is
  // a zero gradient. See the contract above.
  virtual TensorList backward(const Tensor& grad_out) = 0;
  // Frees what forward saved for backward. Called after backward unless the
  // graph is retained.
  virtual void release_saved() {}
  // The op's forward formula, backward rule and docs page (see OpDoc). Ops
  // written outside the library may leave it empty.
  virtual OpDoc doc() const { return {}; }
  // Saved tensors worth showing a learner, by name (attention's
  // probabilities "P"); empty by default. Valid until release_saved().
  virtual std::vector<std::pair<std::string, Tensor>> inspect() const { return {}; }

  // Whether input i requires grad, i.e. whether backward's entry i is used.
  bool needs_grad(size_t i) const { return i < inputs.size() && inputs[i].requires_grad(); }

  // Stores the variables this op read as graph references (see var.h).
  void adopt_inputs(VarList in);

  // The variables this op read. Copy one to keep it (a copy is a counted
  // handle); moving out of this list would give an uncounted one.
  VarList inputs;
  Shape out_shape;               // the shape of the op's output (checked against grad_out)
  bool released = false;         // saved tensors already freed by a backward
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
