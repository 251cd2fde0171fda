// The explorer's trace (explorer/trace.h) read back and checked against the
// engine, and every Node type's formula and rule (Node::doc()). The float64
// finite differences are tests/test_explorer_grad.cpp; the page in a real
// browser is tests/cli/explorer_browser.sh.
#include <cxxabi.h>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/recompute.h"
#include "core/elementwise.h"
#include "doc_sections.h"
#include "recording_node.h"
#include "explorer/page.h"
#include "explorer/trace.h"
#include "io/run_program.h"
#include "models/transformer.h"
#include "models/vit.h"
#include "nn/cross_entropy.h"
#include "nn/dropout.h"
#include "nn/layernorm.h"
#include "nn/rmsnorm.h"
#include "nn/rope.h"
#include "nn/span_logits.h"
#include "nn/moe.h"
#include "nn/swiglu.h"
#include "tests/errors.h"
#include "tests/temp_dir.h"
#include "tests/test_seed.h"

using namespace qkv;
using qkv::testing::recorded;
using Json = nlohmann::json;

namespace {

std::vector<unsigned char> unbase64(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::vector<unsigned char> out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    const int v = val(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<unsigned char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

Shape shape_of(const Json& j) {
  Shape s;
  for (const auto& d : j) s.push_back(d.get<int64_t>());
  return s;
}

// A trace tensor equals the engine's tensor bit for bit.
void check_tensor(const Json& j, const Tensor& t, const std::string& what) {
  INFO(what);
  if (!t.defined()) {
    CHECK(j.is_null());
    return;
  }
  REQUIRE(j.is_object());
  CHECK(j["dtype"] == explorer::precision_name());
  CHECK(shape_of(j["shape"]) == t.shape());
  const std::vector<unsigned char> bytes = unbase64(j["data"].get<std::string>());
  REQUIRE(bytes.size() == static_cast<size_t>(t.numel()) * sizeof(real));
  CHECK(std::memcmp(bytes.data(), t.data(), bytes.size()) == 0);
}

nn::TransformerConfig tiny() {
  nn::TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 8;
  c.d_model = 8;
  c.heads = 2;
  c.encoder_layers = c.decoder_layers = 1;
  c.d_ff = 16;
  c.dropout = 0;
  c.seed = 3;
  return c;
}

}  // namespace

TEST_CASE(
    "explorer trace read back: every node's op, module, inputs, shape, value and gradient are "
    "the engine's, bit for bit, and the parameters carry their names (a 1+1-layer "
    "Transformer)") {
  nn::Seq2SeqTransformer model(tiny());
  const nn::Tokens src{{3, 4, 5}, 1, 3, {}}, tgt{{1, 3, 4, 5}, 1, 4, {}};
  const std::vector<int64_t> next{3, 4, 5, 2};
  Var loss;
  explorer::TraceOptions opt;
  opt.finite_differences = false;  // float64: tests/test_explorer_grad.cpp
  opt.title = "tiny";
  opt.attention_tokens = [](const std::string& module, int64_t T, int64_t S) {
    return explorer::AttentionAxes{std::vector<std::string>(T, module),
                                   std::vector<std::string>(S, "key")};
  };
  const explorer::Trace t = explorer::record_trace(
      [&] { return loss = nn::cross_entropy(model.forward(src, tgt), next, 0); }, &model, opt);
  const Json j = Json::parse(t.json);
  CHECK(j["format"] == "qkv-trace");
  CHECK(j["version"] == 1);
  CHECK(j["title"] == "tiny");
  CHECK(j["precision"] == explorer::precision_name());

  // The engine's own graph, as record_trace left it (values kept, gradients retained).
  const VarList order = topological_order(loss);
  REQUIRE(j["nodes"].size() == order.size());
  CHECK(t.nodes == order.size());
  CHECK(j["loss"] == order.size() - 1);
  CHECK(j["loss_value"].get<double>() == static_cast<double>(loss.item()));
  std::map<const VarImpl*, size_t> id;
  for (size_t i = 0; i < order.size(); ++i) id[order[i].impl()] = i;
  std::map<const VarImpl*, std::string> names;
  for (auto& np : model.named_parameters()) names[np.second.impl()] = np.first;

  size_t ops = 0, attention = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const Json& n = j["nodes"][i];
    const Var& v = order[i];
    INFO("node " << i);
    CHECK(n["id"] == i);
    CHECK(shape_of(n["shape"]) == v.shape());
    check_tensor(n["value"], v.data(), "value");
    check_tensor(n["grad"], v.grad(), "grad");
    if (const auto& fn = v.grad_fn()) {
      ++ops;
      CHECK(n["kind"] == "op");
      CHECK(n["op"] == fn->name());
      CHECK(n["module"] == std::string(fn->module ? fn->module : ""));
      CHECK(n["forward"] == fn->doc().forward);
      CHECK(n["backward"] == fn->doc().backward);
      REQUIRE(n["inputs"].size() == fn->inputs.size());
      for (size_t k = 0; k < fn->inputs.size(); ++k) {
        const Var& in = fn->inputs[k];
        if (in.requires_grad())
          CHECK(n["inputs"][k] == id.at(in.impl()));
        else
          CHECK(n["inputs"][k].is_null());
        CHECK(shape_of(n["input_shapes"][k]) == in.shape());
      }
      if (std::string(fn->name()) == "multi_head_attention") {
        ++attention;
        const Json& P = n["saved"]["P"];
        CHECK(shape_of(P["shape"]) == Shape{1, 2, v.size(1), shape_of(n["input_shapes"][1])[1]});
        CHECK(P["queries"][0] == n["module"]);
        CHECK(P["keys"].size() == static_cast<size_t>(shape_of(n["input_shapes"][1])[1]));
      }
    } else {
      CHECK(n["kind"] == "leaf");
      CHECK(n["parameter"] == true);  // no input Var requires grad here
      CHECK(n["name"] == names.at(v.impl()));
    }
  }
  CHECK(ops == t.ops);
  CHECK(attention == 3);  // encoder self, decoder self and cross
  CHECK(j["forward_order"].size() == ops);
  CHECK(j["finite_differences"].is_null());
  // The module boxes of the drawing carry the names too.
  CHECK(t.dot.find("cluster_decoder.layers.0") != std::string::npos);
  CHECK(t.dot.find("w_q: weight (8,8), bias (8)") != std::string::npos);
}

TEST_CASE(
    "explorer trace of a GPT with grouped-query attention and rotary positions: the attention "
    "node states the group-sum and rotation rule, keeps P (B,H,T,S) and reads w_k (K*d_k, D)") {
  nn::GPTConfig c;
  c.vocab = 8;
  c.d_model = 8;
  c.heads = 4;
  c.kv_heads = 2;
  c.rope_base = 10000;
  c.layers = 1;
  c.d_ff = 16;
  c.max_positions = 4;
  c.dropout = 0;
  c.seed = 3;
  nn::GPT model(c);
  const nn::Tokens ids{{3, 4, 5, 1}, 1, 4, {}};
  explorer::TraceOptions opt;
  opt.finite_differences = false;  // float64: tests/test_explorer_grad.cpp
  const explorer::Trace t = explorer::record_trace(
      [&] {
        return nn::cross_entropy(model.forward(ids), {4, 5, 1, 2});
      },
      &model, opt);
  const Json j = Json::parse(t.json);
  size_t attention = 0;
  for (const auto& n : j["nodes"]) {
    if (n["kind"] != "op" || n["op"] != "multi_head_attention") continue;
    ++attention;
    CHECK(n["backward"].get<std::string>().rfind("dK_g = R^T sum_{h in g}", 0) == 0);
    CHECK(n["forward"].get<std::string>().find("g = h / (H/K)") != std::string::npos);
    CHECK(shape_of(n["saved"]["P"]["shape"]) == Shape{1, 4, 4, 4});
    CHECK(shape_of(n["input_shapes"][4]) == Shape{2 * 2, 8});  // w_k: K*d_k = 2*2 rows
  }
  CHECK(attention == 1);
  CHECK(t.dot.find("w_k: weight (4,8), bias (4)") != std::string::npos);
}

TEST_CASE(
    "explorer trace of a GPT with T5's relative positions: each attention node states the "
    "scatter-add into the buckets and reads the one shared table (H, buckets) as its last input") {
  nn::GPTConfig c;
  c.vocab = 8;
  c.d_model = 8;
  c.heads = 2;
  c.rel_buckets = 4;
  c.rel_max_distance = 3;
  c.layers = 2;
  c.d_ff = 16;
  c.max_positions = 4;
  c.dropout = 0;
  c.seed = 3;
  nn::GPT model(c);
  const nn::Tokens ids{{3, 4, 5, 1}, 1, 4, {}};
  explorer::TraceOptions opt;
  opt.finite_differences = false;  // float64: tests/test_explorer_grad.cpp
  const explorer::Trace t = explorer::record_trace(
      [&] {
        return nn::cross_entropy(model.forward(ids), {4, 5, 1, 2});
      },
      &model, opt);
  const Json j = Json::parse(t.json);
  size_t attention = 0;
  for (const auto& n : j["nodes"]) {
    if (n["kind"] != "op" || n["op"] != "multi_head_attention") continue;
    ++attention;
    CHECK(n["backward"].get<std::string>().rfind("dtable[h, k] = sum over b", 0) == 0);
    CHECK(n["forward"].get<std::string>().find("table[h, bucket(j - i)]") != std::string::npos);
    CHECK(shape_of(n["input_shapes"].back()) == Shape{2, 4});  // the table (H, buckets)
  }
  CHECK(attention == 2);
}

TEST_CASE(
    "explorer trace: backward_order is the order run_backward calls the nodes' backward (a "
    "diamond, a skip connection, and a branch no gradient reaches)") {
  std::vector<std::string> log;
  Var x(Tensor::ones({1}), true);
  explorer::TraceOptions opt;
  opt.finite_differences = false;
  const explorer::Trace t = explorer::record_trace(
      [&] {
        const Var a = recorded("a", {x}, log);
        const Var b = recorded("b", {a}, log), c = recorded("c", {a}, log);
        const Var d = recorded("d", {b, c}, log);
        return recorded("e", {d, x}, log);
      },
      nullptr, opt);
  REQUIRE(log.size() == 5);
  const Json j = Json::parse(t.json);
  std::vector<std::string> order;
  for (const auto& id : j["backward_order"]) order.push_back(j["nodes"][id.get<size_t>()]["op"]);
  CHECK(order == log);
  CHECK(j["nodes"][j["backward_order"][0].get<size_t>()]["op"] == "e");
  // Forward: every op after the ops it reads.
  std::vector<std::string> fwd;
  for (const auto& id : j["forward_order"]) fwd.push_back(j["nodes"][id.get<size_t>()]["op"]);
  CHECK(fwd.front() == "a");
  CHECK(fwd.back() == "e");
  CHECK(j["nodes"][0]["name"] == "input");  // an unnamed leaf outside any model
}

TEST_CASE("explorer trace: a loss that is not one number, or needs no grad, is refused") {
  Var w(Tensor::ones({2, 2}), true);
  CHECK_THROWS_WITH(explorer::record_trace([&] { return mul(w, real(2)); }, nullptr),
                    doctest::Contains("must return one number, got shape (2,2)"));
  Var c(Tensor::ones({1}), false);
  CHECK_THROWS_WITH(explorer::record_trace([&] { return mul(c, real(2)); }, nullptr),
                    doctest::Contains("does not require grad"));
}

namespace {

// "qkv::nn::(anonymous namespace)::LayerNormNode" -> "LayerNormNode"
std::string type_name(const Node& n) {
  int status = 0;
  char* d = abi::__cxa_demangle(typeid(n).name(), nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : typeid(n).name();
  std::free(d);
  const size_t colon = s.rfind("::");
  return colon == std::string::npos ? s : s.substr(colon + 2);
}

// Every `struct XNode : Node` in the library's folders (Makefile's LAYERS).
std::set<std::string> node_types_in_sources() {
  std::ifstream mk("Makefile");
  std::string line, layers;
  while (std::getline(mk, line))
    if (line.rfind("LAYERS", 0) == 0) layers = line.substr(line.find('=') + 1);
  std::istringstream ls(layers);
  std::set<std::string> types;
  const std::regex decl(R"(struct\s+(\w+)\s*:\s*(public\s+)?(qkv::)?Node\b)");
  for (std::string dir; ls >> dir;) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cpp" && ext != ".h") continue;
      std::ifstream in(e.path());
      std::string text;  // comments aside (node.h's example op is one)
      for (std::string line; std::getline(in, line);)
        if (line.find_first_not_of(' ') == std::string::npos ||
            line.compare(line.find_first_not_of(' '), 2, "//") != 0)
          text += line + "\n";
      for (std::sregex_iterator it(text.begin(), text.end(), decl), end; it != end; ++it)
        types.insert((*it)[1]);
    }
  }
  return types;
}

}  // namespace

TEST_CASE(
    "every Node type of the library links a section of a docs/ page that names it and states "
    "its backward rule (Node::doc())") {
  // A graph that uses every op: the primitive ops, the fused layers, and a
  // Transformer (embedding, positions, attention, feed-forward, add_layer_norm,
  // linear, cross-entropy).
  Generator g = testing::test_generator();
  Var a(Tensor::uniform({2, 3}, 0.5, 1.5, g), true), b(Tensor::uniform({2, 3}, 0.5, 1.5, g), true);
  Var w(Tensor::uniform({3, 3}, -1, 1, g), true);
  Var gamma(Tensor::ones({3}), true), beta(Tensor::zeros({3}), true);
  Var x = add(sub(mul(a, b), div(a, b)), rsub(1, rdiv(2, a)));
  x = add(mul(neg(exp(x)), real(0.5)), add(log(a), real(1)));
  x = add(add(sqrt(a), pow(x, 2)), add(relu(x), gelu(x)));
  x = add(add(tanh(x), sigmoid(x)), matmul(x, w));
  x = nn::layer_norm(x, gamma, beta);
  x = nn::add_layer_norm(x, a, gamma, beta);
  x = nn::add_rms_norm(nn::rms_norm(x, gamma), a, gamma);
  x = nn::swiglu(x, w, w, w);
  x = reshape(nn::rope(reshape(x, {1, 3, 2}), 1, 10000, 2), {2, 3});  // T 3, d_k 2
  Generator drop(1);
  x = nn::dropout(x, real(0.5), drop);
  x = permute(reshape(x, {3, 2}), {1, 0});
  Var s = add(add(sum(softmax(x)), mean(log_softmax(x))), add(max(x), sum(x, 0)));
  s = add(s, sum(recompute([](const std::vector<Var>& v) { return mul(v[0], v[0]); }, {a})));
  // A mixture of experts: router, gather, gated sum, load-balancing loss.
  nn::MoE moe(nn::Activation::ReLU, 3, 4, {2, 1, 2.0}, true, g);
  s = add(s, sum(moe.forward(a)));
  s = add(s, moe.aux_loss());

  nn::Seq2SeqTransformer model(tiny());
  const nn::Tokens src{{3, 4}, 1, 2, {}}, tgt{{1, 3}, 1, 2, {}};
  Var loss = nn::cross_entropy(model.forward(src, tgt), {3, 2}, 0);
  // Attention with a shared key/value head and rotary positions states its own rule.
  nn::MultiHeadAttention gqa(4, 2, true, g, 0, /*kv_heads=*/1);
  gqa.rope_base = 10000;
  Var xa(Tensor::normal({1, 3, 4}, 0, 1, g), true);
  Var total = add(add(sum(s), loss), sum(gqa.forward(xa, xa, nn::AttentionMask::causal_mask())));
  // The ViT's patch projection, class token and the head's read of it.
  nn::ViTConfig vc;
  vc.image = 4;
  vc.patch = 2;
  vc.classes = 2;
  vc.d_model = 4;
  vc.heads = 1;
  vc.layers = 1;
  vc.d_ff = 4;
  nn::ViT vit(vc);
  Var images(Tensor::uniform({1, 1, 4, 4}, 0, 1, g), true);
  total = add(total, nn::cross_entropy(vit.forward(images), {1}));
  // Question answering's head: two logits a token, masked to the context.
  Var span_z(Tensor::normal({1, 3, 2}, 0, 1, g), true);
  total = add(total, nn::cross_entropy(nn::span_logits(span_z, {1, 0, 1}), {2, 0}));

  std::set<std::string> seen;
  for (const Var& v : topological_order(total)) {
    if (!v.grad_fn()) continue;
    const Node& n = *v.grad_fn();
    const std::string type = type_name(n);
    seen.insert(type);
    INFO(type << " (" << n.name() << ")");
    const OpDoc d = n.doc();
    CHECK(std::strlen(d.forward) > 0);
    CHECK(std::strlen(d.backward) > 0);
    CHECK(std::string(d.page).rfind("docs/", 0) == 0);
    CHECK(testing::derived_in_problem(d.page, n.name(), d.backward) == "");
  }
  // Every Node type declared in the library's sources was in the graph.
  const std::set<std::string> declared = node_types_in_sources();
  CHECK(declared.size() >= 30);
  for (const std::string& type : declared) CHECK_MESSAGE(seen.count(type), type);
}

TEST_CASE("the derived-in check refuses a link without its section, name or rule") {
  using testing::derived_in_problem;
  const std::string rule = "da = dy * b, db = dy * a (each summed back over its broadcast axes)";
  CHECK(derived_in_problem("docs/primitives.md#mul", "mul", rule) == "");
  CHECK(derived_in_problem("docs/primitives.md", "mul", rule).find("names no section") !=
        std::string::npos);
  CHECK(derived_in_problem("docs/missing.md#mul", "mul", rule).find("does not exist") !=
        std::string::npos);
  CHECK(derived_in_problem("docs/primitives.md#no-such", "mul", rule).find("no heading") !=
        std::string::npos);
  // The section of another op: the name and the rule are not there.
  CHECK(derived_in_problem("docs/primitives.md#add", "mul", rule).find("does not name") !=
        std::string::npos);
  CHECK(derived_in_problem("docs/primitives.md#mul", "mul", "da = dy * 2 b")
            .find("does not state the rule") != std::string::npos);
  CHECK(testing::heading_slug("1. Token ids become vectors: `embedding`") ==
        "1-token-ids-become-vectors-embedding");
}

TEST_CASE(
    "explorer page: one self-contained HTML file holding every trace as JSON, each graph laid "
    "out by Graphviz with node ids the trace's, and the script; no trace is refused") {
  CHECK_THROWS_WITH(explorer::page_html({}), doctest::Contains("no trace"));
  if (find_program("dot").empty()) {
    MESSAGE("Graphviz's dot is not installed: skipped (make test installs it)");
    return;
  }
  Var q(Tensor::ones({1, 2}), true);
  q.set_name("q");
  explorer::TraceOptions opt;
  opt.show_leaves = true;
  opt.title = "</script> in a title";
  const explorer::Trace t =
      explorer::record_trace([&] { return sum(softmax(mul(q, real(2)))); }, nullptr, opt);
  const std::string html = explorer::page_html({t, t});
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("id=\"trace-1\"") != std::string::npos);
  CHECK(html.find("<title>v0</title>") != std::string::npos);  // the leaf q, node 0
  CHECK(html.find("svg-pan-zoom") != std::string::npos);
  CHECK(html.find("Redistribution and use in source and binary forms") != std::string::npos);
  CHECK(html.find("qkvExplorer") != std::string::npos);
  CHECK(html.find("</script> in a title") == std::string::npos);  // escaped inside the JSON
  CHECK(html.find("<script src") == std::string::npos);
}

namespace {
// Sets an environment variable for one scope, then restores it.
struct EnvVar {
  std::string name, old;
  bool had;
  EnvVar(const std::string& n, const std::string& value) : name(n) {
    const char* v = std::getenv(n.c_str());
    had = v != nullptr;
    if (had) old = v;
    setenv(n.c_str(), value.c_str(), 1);
  }
  ~EnvVar() {
    if (had)
      setenv(name.c_str(), old.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

// Every file under `dir` named PWNED (what a shell-built command would have made).
std::vector<std::string> pwned_under(const std::filesystem::path& dir) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.path().filename() == "PWNED") found.push_back(e.path().string());
  return found;
}
}  // namespace

TEST_CASE(
    "explorer layout_svg: a $TMPDIR named with an apostrophe, or with `';touch PWNED;'` in it, "
    "lays the graph out and runs nothing (Graphviz is started without a shell)") {
  if (find_program("dot").empty()) {
    MESSAGE("Graphviz's dot is not installed: skipped (make test installs it)");
    return;
  }
  testing::TempDir tmp;
  // The second one, split by its slashes into folders, is the command
  // `touch <tmp>/PWNED` inside quotes that a shell would have closed.
  for (const std::string& name : std::vector<std::string>{"it's", "x';touch PWNED;'",
                                                          "x';touch " + tmp.file("PWNED") + ";'"}) {
    const std::string dir = tmp.file(name);
    std::filesystem::create_directories(dir);
    const EnvVar env("TMPDIR", dir);
    std::string svg;
    CHECK_NOTHROW(svg = explorer::layout_svg("digraph { qkv_node_a -> qkv_node_b }"));
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(svg.find("<title>qkv_node_a&#45;&gt;qkv_node_b</title>") != std::string::npos);
    CHECK(std::filesystem::is_empty(dir));  // its temporary file is removed again
  }
  CHECK(pwned_under(tmp.dir).empty());
  CHECK(!std::filesystem::exists("PWNED"));
}

TEST_CASE("explorer layout_svg: a failing `dot` is an error naming dot and quoting its stderr") {
  if (find_program("dot").empty()) {
    MESSAGE("Graphviz's dot is not installed: skipped (make test installs it)");
    return;
  }
  const std::string msg = testing::error_of([] { explorer::layout_svg("digraph { a -> }"); });
  INFO(msg);
  CHECK(msg.rfind("explorer: `dot -Tsvg` (", 0) == 0);
  CHECK(msg.find("failed with status 1: ") != std::string::npos);
  CHECK(msg.find("syntax error in line 1") != std::string::npos);  // Graphviz's own words
}
