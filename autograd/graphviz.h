// Draw the autograd graph: write_dot prints the graph that ends in `root` in
// Graphviz's DOT language, to render with `dot -Tsvg graph.dot -o graph.svg`.
//
//   Var loss = ...;  loss.backward();
//   std::ofstream f("graph.dot");  write_dot(loss, f);
//
// One DOT node per op and per leaf that is drawn (below), in topological
// order (inputs before the ops that read them), and one edge per recorded
// input between drawn nodes, pointing the way the forward pass went (the
// gradient flows back against the arrows). An op's node shows
//   - the module that made it, when that was recorded (see below): "ffn: ";
//   - the op's name (Node::name()) and the output's shape;
//   - |grad|, the Frobenius norm of .grad(), when the output has one (after
//     a backward, for non-leaves that called retain_grad);
//   - the leaves it reads, "w_q: weight (8,8), bias (8)". A leaf (a variable
//     no op made: a parameter, or an input that requires grad) read by one op
//     is folded into that op's label, named from the op's module and grouped
//     by the module it belongs to. A leaf read by several ops (a tied weight)
//     stays a node, so the drawing still shows that one tensor feeds them all.
// With show_parameters every leaf is a node of its own, as an ellipse showing
// its name (Var::name(), e.g. set from Module::named_parameters(), or "leaf"),
// shape and |grad| (leaves that require grad hold one after a backward).
// Inputs that do not require grad (constants, masks) are not in the graph,
// exactly as the engine does not visit them. The output is deterministic.
//
// Boxes by module. Node::module holds the dotted path of the module whose
// forward made the op ("decoder.layers.0.cross_attn"), recorded by
// nn::ModuleScope while detect-anomaly mode is on (autograd/anomaly.h), so
// run the forward you draw under a DetectAnomalyGuard. Nodes are then put in
// nested `subgraph cluster_...` boxes, one per module, labelled with the
// module's name, and read so that a Transformer layer is one box:
//   - a module that made a single op is no box of its own: its name heads
//     that op's label ("cross_attn: multi_head_attention"), and its drawn
//     leaves join the enclosing box;
//   - a box holding nothing but one box merges with it ("encoder" and
//     "layers.0" make one box "encoder.layers.0"); "layers.0" is one name;
//   - ops made outside any module, or by the outermost module itself, stay at
//     the top level. Without recorded paths the graph is drawn flat.
#pragma once
#include <iosfwd>
#include <string>

#include "autograd/var.h"

namespace qkv {

struct DotOptions {
  bool show_parameters = false;   // every leaf a node of its own (else folded into its op)
  bool cluster_by_module = true;  // boxes by Node::module (else one flat graph)
};

void write_dot(const Var& root, std::ostream& os, const DotOptions& options = {});

// The same text as a string.
std::string dot_string(const Var& root, const DotOptions& options = {});

}  // namespace qkv
