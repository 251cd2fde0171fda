// write_dot: the autograd graph as Graphviz DOT. Checks that every op, shape
// and named leaf appears, that edges are exactly the engine's edges, that
// gradient norms appear only where a gradient is held, and determinism.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/graphviz.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/error.h"

using namespace qkv;

namespace {

size_t count(const std::string& s, const std::string& sub) {
  size_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}
bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// x (2,3) @ w (3,2) -> relu -> z * z -> + c (constant) -> sum: five ops.
struct SmallGraph {
  Var x, w, c, y, z, u, v, loss;
};
SmallGraph small_graph() {
  SmallGraph g;
  g.x = Var(Tensor::from_vector({1, -2, 3, 0.5, 1, -1}, {2, 3}), true).set_name("x");
  g.w = Var(Tensor::from_vector({0.5, -1, 2, 1, -0.5, 0.25}, {3, 2}), true).set_name("w");
  g.c = Var(Tensor::from_vector({1, 2, 3, 4}, {2, 2}), false).set_name("const_c");
  g.y = matmul(g.x, g.w);  // (2,3) x (3,2) -> (2,2)
  g.z = relu(g.y);
  g.u = g.z * g.z;         // z used twice: two edges
  g.v = g.u + g.c;         // c needs no grad: no edge, no node
  g.loss = sum(g.v);       // ()
  return g;
}

// The engine's edge count: grad-requiring inputs of every recorded op.
size_t engine_edges(const Var& root) {
  size_t n = 0;
  for (const Var& v : topological_order(root))
    if (v.grad_fn())
      for (const Var& in : v.grad_fn()->inputs) n += in.requires_grad() ? 1 : 0;
  return n;
}

std::string norm_text(const Tensor& g) {
  double s = 0;
  for (int64_t i = 0; i < g.numel(); ++i) s += double(g.data()[i]) * g.data()[i];
  char buf[48];
  std::snprintf(buf, sizeof buf, "|grad| %.4g", std::sqrt(s));
  return buf;
}

}  // namespace

TEST_CASE("write_dot names every op, every shape and every named leaf of the graph") {
  SmallGraph g = small_graph();
  const std::string dot = dot_string(g.loss);
  CHECK(dot.rfind("digraph", 0) == 0);
  CHECK(dot.back() == '\n');
  for (const char* op : {"matmul", "relu", "mul", "add", "sum"})
    CHECK_MESSAGE(has(dot, std::string("\"") + op + "\\n"), op);
  CHECK(has(dot, "\"x\\n(2,3)"));
  CHECK(has(dot, "\"w\\n(3,2)"));
  CHECK(has(dot, "matmul\\n(2,2)"));
  CHECK(has(dot, "sum\\n()"));
  // One node per variable the engine visits; the constant is not one of them.
  CHECK(count(dot, "[label=") == topological_order(g.loss).size());
  CHECK(count(dot, "[label=") == 7);
  CHECK_FALSE(has(dot, "const_c"));
}

TEST_CASE("write_dot draws exactly the engine's edges: one per grad-requiring input use") {
  SmallGraph g = small_graph();
  const std::string dot = dot_string(g.loss);
  // matmul 2 + relu 1 + mul 2 (z twice) + add 1 (c excluded) + sum 1
  CHECK(engine_edges(g.loss) == 7);
  CHECK(count(dot, "->") == engine_edges(g.loss));
  // A single leaf: no edges at all.
  Var lone(Tensor::ones({3}), true);
  const std::string one = dot_string(lone);
  CHECK(count(one, "->") == 0);
  CHECK(count(one, "[label=") == 1);
  CHECK(has(one, "leaf\\n(3)"));  // an unnamed leaf
}

TEST_CASE("write_dot is deterministic: same graph twice and a rebuilt graph give the same text") {
  SmallGraph a = small_graph();
  const std::string first = dot_string(a.loss);
  CHECK(dot_string(a.loss) == first);
  SmallGraph b = small_graph();
  CHECK(dot_string(b.loss) == first);
  a.loss.backward();
  b.loss.backward();
  CHECK(dot_string(a.loss) == dot_string(b.loss));
}

TEST_CASE("write_dot shows |grad| exactly on the Vars that hold a gradient, with its norm") {
  SmallGraph g = small_graph();
  CHECK_FALSE(has(dot_string(g.loss), "|grad|"));  // before backward: none
  g.z.retain_grad();
  g.loss.backward();
  const std::string dot = dot_string(g.loss);
  // Leaves x and w, and the retained z; not y, u, v, loss.
  CHECK(count(dot, "|grad|") == 3);
  CHECK(has(dot, "\"x\\n(2,3)\\n" + norm_text(g.x.grad()) + "\""));
  CHECK(has(dot, "\"w\\n(3,2)\\n" + norm_text(g.w.grad()) + "\""));
  CHECK(has(dot, "\"relu\\n(2,2)\\n" + norm_text(g.z.grad()) + "\""));
}

TEST_CASE("write_dot escapes quotes and backslashes in names and rejects an undefined root") {
  Var a = Var(Tensor::ones({2}), true).set_name("say \"hi\"\\");
  const std::string dot = dot_string(sum(a));
  CHECK(has(dot, "say \\\"hi\\\"\\\\\\n(2)"));
  try {
    dot_string(Var());
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(has(e.what(), "write_dot"));
  }
}
