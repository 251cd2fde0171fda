#include "autograd/graphviz.h"

#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "core/error.h"

namespace qkv {

namespace {

// A DOT string literal body: quotes and backslashes escaped, newlines as \n.
std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// sqrt(sum g^2), summed in double.
double frobenius_norm(const Tensor& g) {
  const real* p = g.data();
  double s = 0;
  for (int64_t i = 0; i < g.numel(); ++i) s += static_cast<double>(p[i]) * p[i];
  return std::sqrt(s);
}

std::string label_of(const Var& v) {
  std::string title;
  if (v.grad_fn())
    title = v.grad_fn()->name();
  else
    title = v.name().empty() ? "leaf" : v.name();
  std::string label = escape(title) + "\\n" + to_string(v.shape());
  if (v.grad().defined()) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "\\n|grad| %.4g", frobenius_norm(v.grad()));
    label += buf;
  }
  return label;
}

}  // namespace

void write_dot(const Var& root, std::ostream& os) {
  if (!root.defined()) throw Error("write_dot: the root Var is undefined");
  const VarList order = topological_order(root);
  std::unordered_map<const VarImpl*, size_t> id;  // variable -> its index in `order`
  id.reserve(order.size() * 2);
  for (size_t i = 0; i < order.size(); ++i) id[order[i].impl()] = i;

  os << "digraph autograd {\n"
     << "  // Arrows follow the forward pass; gradients flow against them.\n"
     << "  rankdir=TB;\n"
     << "  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n"
     << "  edge [color=\"#555555\"];\n";
  for (size_t i = 0; i < order.size(); ++i) {
    const Var& v = order[i];
    os << "  v" << i << " [label=\"" << label_of(v) << "\"";
    if (!v.grad_fn())  // a leaf: parameters and inputs
      os << ", shape=ellipse, style=filled, fillcolor=\"#dbe9f6\", fontsize=8";
    else if (v.same_as(root))
      os << ", style=filled, fillcolor=\"#f6dbdb\"";
    os << "];\n";
  }
  // The engine's edges: every input that requires grad, once per use.
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& fn = order[i].grad_fn();
    if (!fn) continue;
    for (const Var& in : fn->inputs)
      if (in.requires_grad()) os << "  v" << id.at(in.impl()) << " -> v" << i << ";\n";
  }
  os << "}\n";
}

std::string dot_string(const Var& root) {
  std::ostringstream os;
  write_dot(root, os);
  return os.str();
}

}  // namespace qkv
