// Draw the autograd graph: write_dot prints the graph that ends in `root` in
// Graphviz's DOT language, to render with `dot -Tsvg graph.dot -o graph.svg`.
//
//   Var loss = ...;  loss.backward();
//   std::ofstream f("graph.dot");  write_dot(loss, f);
//
// One DOT node per variable, in topological order (inputs before the ops that
// read them), and one edge per recorded input, pointing the way the forward
// pass went (the gradient flows back against the arrows). A node shows
//   - the op that made it (Node::name()), or for a leaf its name (Var::name(),
//     e.g. set from Module::named_parameters()) or "leaf";
//   - its shape;
//   - |grad|, the Frobenius norm of .grad(), when it has one (leaves that
//     require grad after a backward, and non-leaves that called retain_grad).
// Inputs that do not require grad (constants, masks) are not in the graph,
// exactly as the engine does not visit them. The output is deterministic.
#pragma once
#include <iosfwd>
#include <string>

#include "autograd/var.h"

namespace qkv {

void write_dot(const Var& root, std::ostream& os);

// The same text as a string.
std::string dot_string(const Var& root);

}  // namespace qkv
