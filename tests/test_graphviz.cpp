// write_dot: the autograd graph as Graphviz DOT. With every leaf drawn
// (show_parameters): every op, shape and named leaf appears, edges are exactly
// the engine's edges, gradient norms appear only where a gradient is held, and
// the text is deterministic. By default: leaves folded into the op that reads
// them, and one box (cluster) per module that made several ops.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "errors.h"
#include "autograd/anomaly.h"
#include "autograd/engine.h"
#include "autograd/graphviz.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "nn/cross_entropy.h"
#include "models/transformer.h"
#include "examples/step_through.h"

using namespace qkv;
using qkv::testing::has;

namespace {

size_t count(const std::string& s, const std::string& sub) {
  size_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

// The drawing as it was before folding and boxes: every variable a node.
const DotOptions kEveryNode{/*show_parameters=*/true, /*cluster_by_module=*/true};

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
  g.u = g.z * g.z;    // z used twice: two edges
  g.v = g.u + g.c;    // c needs no grad: no edge, no node
  g.loss = sum(g.v);  // ()
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

TEST_CASE("write_dot with show_parameters names every op, every shape and every named leaf") {
  SmallGraph g = small_graph();
  const std::string dot = dot_string(g.loss, kEveryNode);
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

TEST_CASE("write_dot with show_parameters draws exactly the engine's edges: one per input use") {
  SmallGraph g = small_graph();
  const std::string dot = dot_string(g.loss, kEveryNode);
  // matmul 2 + relu 1 + mul 2 (z twice) + add 1 (c excluded) + sum 1
  CHECK(engine_edges(g.loss) == 7);
  CHECK(count(dot, "->") == engine_edges(g.loss));
  // A single leaf: no edges at all.
  Var lone(Tensor::ones({3}), true);
  const std::string one = dot_string(lone);  // a lone leaf is drawn, folded or not
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
  CHECK(dot_string(a.loss, kEveryNode) == dot_string(b.loss, kEveryNode));
  a.loss.backward();
  b.loss.backward();
  CHECK(dot_string(a.loss) == dot_string(b.loss));
  CHECK(dot_string(a.loss, kEveryNode) == dot_string(b.loss, kEveryNode));
}

TEST_CASE("write_dot shows |grad| exactly on the Vars that hold a gradient, with its norm") {
  SmallGraph g = small_graph();
  CHECK_FALSE(has(dot_string(g.loss, kEveryNode), "|grad|"));  // before backward: none
  g.z.retain_grad();
  g.loss.backward();
  const std::string dot = dot_string(g.loss, kEveryNode);
  // Leaves x and w, and the retained z; not y, u, v, loss.
  CHECK(count(dot, "|grad|") == 3);
  CHECK(has(dot, "\"x\\n(2,3)\\n" + norm_text(g.x.grad()) + "\""));
  CHECK(has(dot, "\"w\\n(3,2)\\n" + norm_text(g.w.grad()) + "\""));
  CHECK(has(dot, "\"relu\\n(2,2)\\n" + norm_text(g.z.grad()) + "\""));
}

TEST_CASE("write_dot escapes quotes and backslashes in names and rejects an undefined root") {
  Var a = Var(Tensor::ones({2}), true).set_name("say \"hi\"\\");
  const std::string dot = dot_string(sum(a), kEveryNode);
  CHECK(has(dot, "say \\\"hi\\\"\\\\\\n(2)"));
  // Folded into sum's label, the name is escaped the same way.
  CHECK(has(dot_string(sum(a)), "sum\\n()\\nsay \\\"hi\\\"\\\\ (2)\""));
  try {
    dot_string(Var());
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(has(e.what(), "write_dot"));
  }
}

// ---- folding and boxes -------------------------------------------------------------------

namespace {

// The text of the box (cluster) of module `path`: from its `subgraph` line to
// its closing brace; "" when there is no such box or it never closes.
std::string box_text(const std::string& dot, const std::string& path) {
  const size_t b = dot.find("subgraph \"cluster_" + path + "\" {");
  if (b == std::string::npos) return "";
  int depth = 0;
  for (size_t i = b; i < dot.size(); ++i) {
    if (dot[i] == '{') ++depth;
    if (dot[i] == '}' && --depth == 0) return dot.substr(b, i + 1 - b);
  }
  return "";
}

// Every brace closes one opened before it, and all are closed at the end (no
// label in these graphs holds a brace).
bool braces_balanced(const std::string& dot) {
  int depth = 0;
  for (char c : dot) {
    depth += c == '{' ? 1 : c == '}' ? -1 : 0;
    if (depth < 0) return false;
  }
  return depth == 0;
}

// Two modules, each making two ops; the loss is made outside any module.
//   x (2,3) -> enc: relu(x W) (3,3) -> dec: tanh(h W) (3,2) -> sum
struct Block : nn::Module {
  nn::Parameter w;
  bool use_tanh;
  Block(Tensor init, bool use_tanh) : use_tanh(use_tanh) { w = register_parameter("w", init); }
  Var forward(const Var& x) const {
    nn::ModuleScope scope(this);  // records "enc" or "dec" in each op, while anomaly mode is on
    const Var y = matmul(x, w);
    return use_tanh ? tanh(y) : relu(y);
  }
};
struct TwoBlocks : nn::Module {
  std::shared_ptr<Block> enc, dec;
  TwoBlocks() {
    enc = register_module(
        "enc", std::make_shared<Block>(Tensor::from_vector({1, 0, 0.5, 0, 1, -1, 2, 1, 0}, {3, 3}),
                                       false));
    dec = register_module(
        "dec", std::make_shared<Block>(Tensor::from_vector({1, -1, 0.5, 2, 0, 1}, {3, 2}), true));
  }
  Var forward(const Var& x) const {
    nn::ModuleScope scope(this);
    return dec->forward(enc->forward(x));
  }
};

struct TwoModuleGraph {
  std::shared_ptr<TwoBlocks> net = std::make_shared<TwoBlocks>();
  Var x, loss;
};
TwoModuleGraph two_module_graph() {
  TwoModuleGraph g;
  for (auto& [name, p] : g.net->named_parameters()) p.set_name(name);  // "enc.w", "dec.w"
  g.x = Var(Tensor::from_vector({1, -2, 3, 0.5, 1, -1}, {2, 3}), true).set_name("x");
  {
    DetectAnomalyGuard record_modules;  // Node::module is recorded in this mode only
    g.loss = sum(g.net->forward(g.x));
  }
  return g;
}

}  // namespace

TEST_CASE("write_dot draws one box per module and folds the parameters into the op reading them") {
  TwoModuleGraph g = two_module_graph();
  g.loss.backward();
  const std::string dot = dot_string(g.loss);
  CHECK(braces_balanced(dot));
  CHECK(count(dot, "subgraph \"cluster_") == 2);
  CHECK(count(dot, "{") == 3);  // the graph and its two boxes
  const std::string enc = box_text(dot, "enc"), dec = box_text(dot, "dec");
  REQUIRE(!enc.empty());
  REQUIRE(!dec.empty());
  CHECK(has(enc, "label=\"enc\";"));
  CHECK(has(dec, "label=\"dec\";"));
  // Each box holds its module's two ops; the parameters are lines of the op
  // that reads them, named from the module ("w", not "enc.w"), and so is the
  // input x, the one other leaf.
  CHECK(count(enc, "[label=") == 2);
  CHECK(count(dec, "[label=") == 2);
  CHECK(has(enc, "\"matmul\\n(2,3)\\nx (2,3), w (3,3)\"];"));
  CHECK(has(enc, "\"relu\\n(2,3)"));
  CHECK(has(dec, "\"matmul\\n(2,2)\\nw (3,2)\"];"));
  CHECK(has(dec, "\"tanh\\n(2,2)"));
  // The loss, made outside any module, is at the top level.
  CHECK(count(dot, "[label=") == 5);
  CHECK_FALSE(has(enc + dec, "sum"));
  CHECK(has(dot, "\"sum\\n()"));
  // No leaf is a node, so no edge starts at one: matmul -> relu -> matmul -> tanh -> sum.
  CHECK(count(dot, "shape=ellipse") == 0);
  CHECK(count(dot, "->") == 4);
  CHECK_FALSE(has(dot, "enc.w"));
  CHECK_FALSE(has(dot, norm_text(g.net->enc->w.grad())));  // folded leaves show no norm
}

TEST_CASE("write_dot with show_parameters draws every leaf as a node, in its reader's box") {
  TwoModuleGraph g = two_module_graph();
  g.loss.backward();
  const std::string dot = dot_string(g.loss, kEveryNode);
  CHECK(braces_balanced(dot));
  CHECK(count(dot, "subgraph \"cluster_") == 2);
  CHECK(count(dot, "[label=") == topological_order(g.loss).size());  // 5 ops + 3 leaves
  CHECK(count(dot, "[label=") == 8);
  CHECK(count(dot, "shape=ellipse") == 3);
  CHECK(count(dot, "->") == engine_edges(g.loss));
  const std::string enc = box_text(dot, "enc"), dec = box_text(dot, "dec");
  // The leaves sit in the box of the op that reads them, named from it, with
  // their gradient norms.
  CHECK(has(enc, "\"w\\n(3,3)\\n" + norm_text(g.net->enc->w.grad()) + "\""));
  CHECK(has(enc, "\"x\\n(2,3)\\n" + norm_text(g.x.grad()) + "\""));
  CHECK(has(dec, "\"w\\n(3,2)\\n" + norm_text(g.net->dec->w.grad()) + "\""));
  CHECK(count(enc, "[label=") == 4);
  CHECK(count(dec, "[label=") == 3);
}

TEST_CASE("write_dot without cluster_by_module draws one flat graph whose ops name their module") {
  TwoModuleGraph g = two_module_graph();
  DotOptions flat;
  flat.cluster_by_module = false;
  const std::string dot = dot_string(g.loss, flat);
  CHECK(braces_balanced(dot));
  CHECK_FALSE(has(dot, "subgraph"));
  CHECK(count(dot, "[label=") == 5);
  CHECK(has(dot, "\"enc: matmul\\n(2,3)\\nx (2,3), w (3,3)\"];"));
  CHECK(has(dot, "\"dec: tanh\\n(2,2)\"];"));
  // Without recorded modules (anomaly mode off) there is nothing to box by.
  TwoBlocks net;
  Var x(Tensor::ones({2, 3}), true);
  const std::string plain = dot_string(sum(net.forward(x)));
  CHECK_FALSE(has(plain, "subgraph"));
  CHECK_FALSE(has(plain, "enc"));
}

TEST_CASE(
    "write_dot boxes nest as module paths do, with one-op modules and box-only boxes merged") {
  // Paths as nn::ModuleScope would record them, set directly:
  //   model.encoder.layers.0.attn   1 op  -> no box of its own: "attn: mul" in layers.0
  //   model.encoder.layers.0.ffn    2 ops -> a box inside layers.0
  //   model.encoder                 only holds layers.0 -> one box "encoder.layers.0"
  //   model.head                    1 op  -> "head: sum" in the box of model
  Var x = Var(Tensor::ones({2, 2}), true).set_name("x");
  Var loss;
  {
    DetectAnomalyGuard record_modules;
    const char* before = anomaly_module();
    set_anomaly_module(intern_module_path("model.encoder.layers.0.attn"));
    Var a = x * x;
    set_anomaly_module(intern_module_path("model.encoder.layers.0.ffn"));
    Var f = relu(a + x);
    set_anomaly_module(intern_module_path("model.head"));
    loss = sum(f);
    set_anomaly_module(before);
  }
  const std::string dot = dot_string(loss);
  CHECK(braces_balanced(dot));
  CHECK(count(dot, "subgraph \"cluster_") == 3);
  const std::string model = box_text(dot, "model");
  const std::string layer = box_text(dot, "model.encoder.layers.0");
  const std::string ffn = box_text(dot, "model.encoder.layers.0.ffn");
  REQUIRE(!ffn.empty());
  CHECK(has(model, layer));
  CHECK(has(layer, ffn));
  CHECK(has(model, "label=\"model\";"));
  CHECK(has(layer, "label=\"encoder.layers.0\";"));
  CHECK(has(ffn, "label=\"ffn\";"));
  CHECK_FALSE(has(dot, "cluster_model.encoder\""));
  CHECK_FALSE(has(dot, "cluster_model.encoder.layers.0.attn"));
  CHECK(has(layer, "\"attn: mul\\n(2,2)"));
  CHECK(has(model, "\"head: sum\\n()"));
  CHECK(count(ffn, "[label=") == 2);  // add and relu
  // x is read by two ops (mul and add): it stays a node, at the top level
  // because its readers' modules differ.
  CHECK(count(dot, "shape=ellipse") == 1);
  CHECK_FALSE(has(model, "\"x\\n(2,2)"));
  CHECK(has(dot, "\"x\\n(2,2)"));
}

TEST_CASE(
    "write_dot of a 1+1-layer Transformer: one box per layer, 16 op nodes, tied weight kept") {
  nn::TransformerConfig c = step::tiny_config();  // the step-through's part 2 model
  for (bool tie : {false, true}) {
    CAPTURE(tie);
    c.tie_weights = tie;
    nn::Seq2SeqTransformer model(c);
    for (auto& [name, p] : model.named_parameters()) p.set_name(name);
    const nn::Tokens src{{3, 4, 5}, 1, 3, {}}, tgt{{1, 3, 4, 5}, 1, 4, {}};
    Var loss;
    {
      DetectAnomalyGuard record_modules;
      loss = nn::cross_entropy(model.forward(src, tgt), {3, 4, 5, 2}, /*ignore_index=*/0);
    }
    const std::string dot = dot_string(loss);
    CHECK(braces_balanced(dot));
    CHECK(count(dot, "subgraph \"cluster_") == 2);
    const std::string enc = box_text(dot, "encoder.layers.0"),
                      dec = box_text(dot, "decoder.layers.0");
    CHECK(count(enc, "[label=") == 4);  // self_attn, norm1, ffn, norm2
    CHECK(count(dec, "[label=") == 6);  // self_attn, norm1, cross_attn, norm2, ffn, norm3
    CHECK(has(dec,
              "\"cross_attn: multi_head_attention\\n(1,4,8)\\nw_q: weight (8,8), bias (8)\\n"
              "w_k: weight (8,8), bias (8)\\nw_v: weight (8,8), bias (8)\\n"
              "w_o: weight (8,8), bias (8)\"];"));
    CHECK(has(enc, "\"norm1: add_layer_norm\\n(1,3,8)\\nweight (8), bias (8)\"];"));
    // 16 ops; every parameter folded but a tied one, which two ops read.
    CHECK(count(dot, "[label=") == (tie ? 17 : 16));
    CHECK(count(dot, "shape=ellipse") == (tie ? 1 : 0));
    CHECK(count(dot_string(loss, kEveryNode), "[label=") == topological_order(loss).size());
  }
}
