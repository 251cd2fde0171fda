// write_dot in three steps, each a function below:
//   1. plan_nodes: which variables of the topological order get a node, and
//      which leaves are folded into the op that reads them;
//   2. build_boxes: the module boxes (Graphviz clusters) the nodes sit in;
//   3. write_box / node_label: print the boxes, the nodes, then the edges.
#include "autograd/graphviz.h"

#include <algorithm>
#include <cctype>
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

// ---- text ------------------------------------------------------------------------------

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

// `path` as seen from inside module `outer`: "decoder.layers.0.ffn" in
// "decoder.layers.0" is "ffn"; "" when they are the same module; the whole
// path when it is not below `outer`.
std::string relative_path(const std::string& path, const std::string& outer) {
  if (path == outer) return "";
  if (outer.empty()) return path;
  if (path.size() > outer.size() && path.compare(0, outer.size(), outer) == 0 &&
      path[outer.size()] == '.')
    return path.substr(outer.size() + 1);
  return path;
}

// "decoder.layers.0.ffn" -> {"decoder", "layers.0", "ffn"}: a number belongs
// to the name before it, as in register_module("layers.0", ...).
std::vector<std::string> module_names(const std::string& path) {
  std::vector<std::string> names;
  size_t b = 0;
  while (b < path.size()) {
    size_t e = path.find('.', b);
    if (e == std::string::npos) e = path.size();
    const std::string part = path.substr(b, e - b);
    const bool number = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    if (number && !names.empty())
      names.back() += "." + part;
    else
      names.push_back(part);
    b = e + 1;
  }
  return names;
}

// ---- 1. which variables are nodes ------------------------------------------------------

// One variable of the topological order, as the drawing sees it.
struct Item {
  bool op = false;             // made by an op (else a leaf)
  bool drawn = true;           // false: a leaf folded into the one op that reads it
  std::string module;          // the module path it is drawn in ("" = top level): an op's
                               // Node::module; a drawn leaf's is that of its readers if they agree
  std::vector<size_t> folded;  // an op's folded leaves, one per use, in input order
};

using Index = std::unordered_map<const VarImpl*, size_t>;  // variable -> its place in the order

std::vector<Item> plan_nodes(const VarList& order, const Index& id, bool show_parameters) {
  std::vector<Item> items(order.size());
  // readers[j]: the ops reading variable j, each once (inputs come before
  // their readers in the order, so a repeat reader is the last one pushed).
  std::vector<std::vector<size_t>> readers(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& fn = order[i].grad_fn();
    if (!fn) continue;
    items[i].op = true;
    if (fn->module) items[i].module = fn->module;
    for (const Var& in : fn->inputs) {
      if (!in.requires_grad()) continue;
      auto& r = readers[id.at(in.impl())];
      if (r.empty() || r.back() != i) r.push_back(i);
    }
  }
  for (size_t j = 0; j < order.size(); ++j) {
    if (order[j].grad_fn() || readers[j].empty()) continue;  // ops, and a lone leaf root
    if (!show_parameters && readers[j].size() == 1) {
      items[j].drawn = false;
      continue;
    }
    items[j].module = items[readers[j][0]].module;
    for (size_t r : readers[j])
      if (items[r].module != items[j].module) items[j].module.clear();  // readers disagree
  }
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& fn = order[i].grad_fn();
    if (!fn) continue;
    for (const Var& in : fn->inputs)
      if (in.requires_grad() && !items[id.at(in.impl())].drawn)
        items[i].folded.push_back(id.at(in.impl()));
  }
  return items;
}

// ---- 2. the module boxes ---------------------------------------------------------------

// A Graphviz cluster: the nodes one module made and the boxes of its
// sub-modules. The outermost Box is the graph itself (path "").
struct Box {
  std::string path;           // the module's full dotted path
  std::vector<size_t> nodes;  // places in the order, ascending
  size_t ops = 0;             // how many of the nodes are ops (the rest: leaves)
  std::vector<Box> boxes;     // sub-modules, in order of first appearance
};

// Makes a Transformer layer read as one box: a sub-box holding one op and no
// box hands its nodes up (the op's label names the module); a sub-box holding
// no node and one box is replaced by that box.
void tidy(Box& box) {
  std::vector<Box> kept;
  for (Box& sub : box.boxes) {
    tidy(sub);
    if (sub.nodes.empty() && sub.boxes.size() == 1) {
      Box inner = std::move(sub.boxes[0]);
      sub = std::move(inner);
    }
    if (sub.boxes.empty() && sub.ops == 1) {
      box.nodes.insert(box.nodes.end(), sub.nodes.begin(), sub.nodes.end());
      box.ops += sub.ops;
    } else {
      kept.push_back(std::move(sub));
    }
  }
  box.boxes = std::move(kept);
  std::sort(box.nodes.begin(), box.nodes.end());
}

Box build_boxes(const std::vector<Item>& items, bool cluster_by_module) {
  Box top;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].drawn) continue;
    Box* box = &top;
    if (cluster_by_module) {
      for (const std::string& name : module_names(items[i].module)) {
        const std::string path = box->path.empty() ? name : box->path + "." + name;
        auto sub = std::find_if(box->boxes.begin(), box->boxes.end(),
                                [&](const Box& b) { return b.path == path; });
        if (sub == box->boxes.end()) {
          box->boxes.emplace_back();
          box->boxes.back().path = path;
          sub = box->boxes.end() - 1;
        }
        box = &*sub;
      }
    }
    box->nodes.push_back(i);
    box->ops += items[i].op ? 1 : 0;
  }
  tidy(top);
  return top;
}

// ---- 3. printing -----------------------------------------------------------------------

struct Drawing {
  const VarList& order;
  const std::vector<Item>& items;
  const Var& root;
};

// The leaves folded into an op, as its label lists them, named from the op's
// module and grouped by the module they belong to:
//   "w_q: weight (8,8), bias (8)"   for decoder.layers.0.self_attn.w_q.{weight,bias}
std::string folded_lines(const Drawing& d, const Item& op) {
  std::string text, group;
  bool first = true;
  for (size_t j : op.folded) {
    const Var& leaf = d.order[j];
    std::string name = leaf.name().empty() ? "leaf" : relative_path(leaf.name(), op.module);
    const size_t dot = name.rfind('.');
    const std::string owner = dot == std::string::npos ? "" : name.substr(0, dot);
    if (dot != std::string::npos) name = name.substr(dot + 1);
    if (first || owner != group) {
      text += "\\n" + (owner.empty() ? "" : escape(owner) + ": ");
      group = owner;
    } else {
      text += ", ";
    }
    first = false;
    text += escape(name) + " " + to_string(leaf.shape());
  }
  return text;
}

// Lines: ["module: "]op name (or a leaf's name), shape, [|grad|], [the folded
// leaves]. The module is left out when the op is the box's own.
std::string node_label(const Drawing& d, size_t i, const std::string& box_path) {
  const Var& v = d.order[i];
  const Item& item = d.items[i];
  std::string label;
  if (v.grad_fn()) {
    const std::string module = relative_path(item.module, box_path);
    if (!module.empty()) label = escape(module) + ": ";
    label += escape(v.grad_fn()->name());
  } else {  // a leaf drawn as a node, named from its box: "w_q.weight"
    const std::string name = relative_path(v.name(), box_path);
    label = escape(name.empty() ? (v.name().empty() ? "leaf" : v.name()) : name);
  }
  label += "\\n" + to_string(v.shape());
  if (v.grad().defined()) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "\\n|grad| %.4g", frobenius_norm(v.grad()));
    label += buf;
  }
  return label + folded_lines(d, item);
}

void write_box(std::ostream& os, const Drawing& d, const Box& box, int depth) {
  const std::string pad(2 * depth + 2, ' ');
  for (size_t i : box.nodes) {
    const Var& v = d.order[i];
    os << pad << "v" << i << " [label=\"" << node_label(d, i, box.path) << "\"";
    if (!v.grad_fn())  // a leaf: parameters and inputs
      os << ", shape=ellipse, style=filled, fillcolor=\"#dbe9f6\", fontsize=8";
    else if (v.same_as(d.root))
      os << ", style=filled, fillcolor=\"#f6dbdb\"";
    os << "];\n";
  }
  for (const Box& sub : box.boxes) {
    os << pad << "subgraph \"cluster_" << escape(sub.path) << "\" {\n"
       << pad << "  label=\"" << escape(relative_path(sub.path, box.path)) << "\";\n"
       << pad << "  style=\"rounded,filled\"; color=\"#999999\"; fillcolor=\""
       << (depth % 2 == 0 ? "#f4f4f4" : "#e6e6e6") << "\"; labeljust=l;\n";
    write_box(os, d, sub, depth + 1);
    os << pad << "}\n";
  }
}

}  // namespace

void write_dot(const Var& root, std::ostream& os, const DotOptions& options) {
  if (!root.defined()) throw Error("write_dot: the root Var is undefined");
  const VarList order = topological_order(root);
  Index id;
  id.reserve(order.size() * 2);
  for (size_t i = 0; i < order.size(); ++i) id[order[i].impl()] = i;
  const std::vector<Item> items = plan_nodes(order, id, options.show_parameters);
  const Box top = build_boxes(items, options.cluster_by_module);

  os << "digraph autograd {\n"
     << "  // Arrows follow the forward pass; gradients flow against them.\n"
     << "  rankdir=TB; ranksep=0.3; nodesep=0.3;\n"
     << "  fontname=\"Helvetica\"; fontsize=11;\n"
     << "  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n"
     << "  edge [color=\"#555555\"];\n";
  write_box(os, Drawing{order, items, root}, top, 0);
  // The engine's edges: every input that requires grad, once per use
  // (folded leaves have no node, so no edge).
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& fn = order[i].grad_fn();
    if (!fn) continue;
    for (const Var& in : fn->inputs) {
      if (!in.requires_grad()) continue;
      const size_t j = id.at(in.impl());
      if (items[j].drawn) os << "  v" << j << " -> v" << i << ";\n";
    }
  }
  os << "}\n";
}

std::string dot_string(const Var& root, const DotOptions& options) {
  std::ostringstream os;
  write_dot(root, os, options);
  return os.str();
}

}  // namespace qkv
