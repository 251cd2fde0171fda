// record_trace in four steps, each a function below:
//   1. run_pass: the forward under the guards that keep values and modules,
//      every intermediate's gradient retained, backward (graph retained, so
//      that saved tensors such as attention's P can still be read);
//   2. node_json: each variable of the topological order as a JSON object;
//   3. finite_differences: nudge leaf elements, rerun the loss, compare;
//   4. the JSON document and its summary.
// The format is docs/trace-format.md.
#include "explorer/trace.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "autograd/anomaly.h"
#include "autograd/engine.h"
#include "autograd/graphviz.h"
#include "autograd/node.h"
#include "core/error.h"
#include "core/generator.h"

namespace qkv::explorer {

using Json = nlohmann::ordered_json;

const char* precision_name() { return sizeof(real) == 8 ? "float64" : "float32"; }

namespace {

// ---- tensors as JSON: shape, dtype and the numbers as base64 (little-endian) ----------

std::string base64(const unsigned char* p, size_t n) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b = (uint32_t(p[i]) << 16) | (i + 1 < n ? uint32_t(p[i + 1]) << 8 : 0) |
                       (i + 2 < n ? uint32_t(p[i + 2]) : 0);
    out += k[(b >> 18) & 63];
    out += k[(b >> 12) & 63];
    out += i + 1 < n ? k[(b >> 6) & 63] : '=';
    out += i + 2 < n ? k[b & 63] : '=';
  }
  return out;
}

Json shape_json(const Shape& s) {
  Json a = Json::array();
  for (int64_t d : s) a.push_back(d);
  return a;
}

// {"shape": [...], "dtype": "float64", "data": "<base64>"}; null when undefined.
Json tensor_json(const Tensor& t) {
  if (!t.defined()) return nullptr;
  const Tensor& c = t;  // tensors are contiguous, row-major (core/tensor.h)
  return Json{{"shape", shape_json(c.shape())},
              {"dtype", precision_name()},
              {"data", base64(reinterpret_cast<const unsigned char*>(c.data()),
                              static_cast<size_t>(c.numel()) * sizeof(real))}};
}

// ---- 1. the pass ------------------------------------------------------------------------

struct Pass {
  Var loss;
  VarList order;                                  // topological_order(loss)
  std::unordered_map<const VarImpl*, size_t> id;  // variable -> place in order
  std::unordered_map<const VarImpl*, std::string> param_names;
};

Pass run_pass(const std::function<Var()>& loss_fn, const nn::Module* model) {
  Pass p;
  if (model)
    for (auto& np : model->named_parameters()) {
      p.param_names[np.second.impl()] = np.first;
      // The drawing (write_dot) names folded parameters by Var::name().
      if (np.second.name().empty()) np.second.set_name(np.first);
    }
  {
    // Values kept for every variable; Node::module recorded by nn::ModuleScope.
    DetectAnomalyGuard record_modules;
    RetainValuesGuard keep_values;
    p.loss = loss_fn();
  }
  if (!p.loss.defined() || p.loss.numel() != 1)
    throw Error("record_trace: the loss function must return one number, got shape " +
                (p.loss.defined() ? to_string(p.loss.shape()) : std::string("(undefined)")));
  if (!p.loss.requires_grad())
    throw Error("record_trace: the loss does not require grad (no parameter or input is in it)");
  p.order = topological_order(p.loss);
  for (size_t i = 0; i < p.order.size(); ++i) p.id[p.order[i].impl()] = i;
  for (Var& v : p.order) {
    if (v.is_leaf())
      v.clear_grad();
    else
      v.retain_grad();
  }
  p.loss.backward(Tensor::ones(p.loss.shape()), /*retain_graph=*/true);
  return p;
}

std::string leaf_name(const Pass& p, const Var& v) {
  auto it = p.param_names.find(v.impl());
  if (it != p.param_names.end()) return it->second;
  return v.name().empty() ? std::string("input") : v.name();
}

// ---- 2. the nodes -----------------------------------------------------------------------

Json node_json(const Pass& p, size_t i, const TraceOptions& opt) {
  const Var& v = p.order[i];
  Json n;
  n["id"] = i;
  const auto& fn = v.grad_fn();
  n["kind"] = fn ? "op" : "leaf";
  if (fn) {
    n["op"] = fn->name();
    n["module"] = fn->module ? fn->module : "";
    Json inputs = Json::array(), input_shapes = Json::array();
    for (const Var& in : fn->inputs) {
      input_shapes.push_back(shape_json(in.shape()));
      inputs.push_back(in.requires_grad() ? Json(p.id.at(in.impl())) : Json(nullptr));
    }
    n["inputs"] = inputs;  // node ids; null for an input outside the graph (a constant)
    n["input_shapes"] = input_shapes;
    const OpDoc d = fn->doc();
    n["forward"] = d.forward;
    n["backward"] = d.backward;
    n["page"] = d.page;
  } else {
    n["name"] = leaf_name(p, v);
    n["parameter"] = p.param_names.count(v.impl()) > 0;
  }
  n["shape"] = shape_json(v.shape());
  n["value"] = tensor_json(v.data());
  n["grad"] = tensor_json(v.grad());
  if (fn) {
    Json extra = Json::object();
    for (const auto& [name, t] : fn->inspect()) {
      if (!t.defined()) continue;
      Json e = tensor_json(t);
      // (B,H,T,S) probabilities: label the query and key axes with tokens.
      if (t.dim() == 4 && opt.attention_tokens) {
        const AttentionAxes axes =
            opt.attention_tokens(fn->module ? fn->module : "", t.size(2), t.size(3));
        if (!axes.queries.empty()) e["queries"] = axes.queries;
        if (!axes.keys.empty()) e["keys"] = axes.keys;
      }
      extra[name] = e;
    }
    if (!extra.empty()) n["saved"] = extra;
  }
  return n;
}

// ---- 3. finite differences --------------------------------------------------------------

// The flat indices to check in one leaf (see TraceOptions), ascending.
std::vector<int64_t> fd_elements(const Var& leaf, const TraceOptions& opt, Generator& gen,
                                 bool* sampled) {
  const int64_t n = leaf.numel();
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  *sampled = opt.fd_every_element_up_to >= 0 && n > opt.fd_every_element_up_to;
  if (!*sampled) return all;
  const Tensor& g = leaf.grad();
  auto mag = [&](int64_t k) { return g.defined() ? std::fabs(double(g.data()[k])) : 0.0; };
  const int64_t top = std::min<int64_t>(opt.fd_largest, n);
  std::partial_sort(all.begin(), all.begin() + top, all.end(), [&](int64_t a, int64_t b) {
    return mag(a) > mag(b) || (mag(a) == mag(b) && a < b);
  });
  std::vector<int64_t> pick(all.begin(), all.begin() + top);
  std::vector<int64_t> rest(all.begin() + top, all.end());
  for (int r = 0; r < opt.fd_random && !rest.empty(); ++r) {
    const int64_t k = gen.randint(0, static_cast<int64_t>(rest.size()));
    pick.push_back(rest[k]);
    rest[k] = rest.back();
    rest.pop_back();
  }
  std::sort(pick.begin(), pick.end());
  return pick;
}

struct FdSummary {
  Json json;
  int64_t checked = 0, failed = 0, retried = 0;
  double max_rel = 0;
};

FdSummary finite_differences(const Pass& p, const std::function<Var()>& loss_fn,
                             const TraceOptions& opt) {
  FdSummary s;
  Json checks = Json::array();
  Json sampled_leaves = Json::array();
  Generator gen(opt.fd_seed);
  auto loss_at = [&]() {
    NoGradGuard no_grad;
    return static_cast<double>(loss_fn().item());
  };
  for (size_t i = 0; i < p.order.size(); ++i) {
    const Var& leaf = p.order[i];
    if (!leaf.is_leaf() || !leaf.requires_grad()) continue;
    bool sampled = false;
    const std::vector<int64_t> elems = fd_elements(leaf, opt, gen, &sampled);
    if (sampled) sampled_leaves.push_back(i);
    Tensor data = leaf.data();  // shares the leaf's storage: nudged in place
    real* x = data.data();
    const Tensor& g = leaf.grad();
    for (int64_t k : elems) {
      const real keep = x[k];
      const double engine = g.defined() ? double(g.data()[k]) : 0.0;
      // The central difference (L(x + h) - L(x - h)) / 2h, with the step
      // actually taken (keep +- h rounded to real).
      auto central = [&](double h) {
        x[k] = static_cast<real>(keep + h);
        const double up = loss_at();
        x[k] = static_cast<real>(keep - h);
        const double down = loss_at();
        x[k] = keep;
        return (up - down) / (double(real(keep + h)) - double(real(keep - h)));
      };
      auto passes = [&](double fd) {
        return std::fabs(engine - fd) <= opt.fd_atol + opt.fd_rtol * std::fabs(fd);
      };
      // A ReLU whose input lies within h of 0 makes L bend between x - h and
      // x + h, and the difference then averages two slopes (a long input
      // holds many such units). A check that fails is taken again at h/10
      // and h/100: the kink then falls outside the interval and a right
      // gradient passes, while a wrong one fails at every step. The step
      // that decided is recorded with the check.
      double h = opt.fd_step, fd = central(h);
      for (int retry = 0; retry < opt.fd_retries && !passes(fd); ++retry) {
        h /= 10;
        fd = central(h);
      }
      const double err = std::fabs(engine - fd);
      const double scale = std::max(std::fabs(engine), std::fabs(fd));
      const double rel = scale > 0 ? err / scale : 0.0;
      const bool pass = passes(fd);
      ++s.checked;
      if (!pass) ++s.failed;
      if (pass && h != opt.fd_step) ++s.retried;  // passed only at a smaller step
      if (std::fabs(fd) > opt.fd_atol) s.max_rel = std::max(s.max_rel, rel);
      checks.push_back(Json::array({i, k, engine, fd, rel, pass, h}));
    }
  }
  s.json = Json{{"precision", precision_name()},
                {"step", opt.fd_step},
                {"atol", opt.fd_atol},
                {"rtol", opt.fd_rtol},
                {"every_element_up_to", opt.fd_every_element_up_to},
                {"largest", opt.fd_largest},
                {"random", opt.fd_random},
                {"sampled_leaves", sampled_leaves},
                {"retries", opt.fd_retries},
                {"retried", s.retried},
                {"columns", {"node", "index", "engine", "fd", "rel_err", "pass", "step"}},
                {"checks", checks}};
  return s;
}

}  // namespace

// ---- 4. the document --------------------------------------------------------------------

Trace record_trace(const std::function<Var()>& loss_fn, const nn::Module* model,
                   const TraceOptions& opt) {
  if (!loss_fn) throw Error("record_trace: no loss function given");
  Pass p = run_pass(loss_fn, model);

  Json nodes = Json::array();
  for (size_t i = 0; i < p.order.size(); ++i) nodes.push_back(node_json(p, i, opt));
  // The engine's order (run_backward): the topological order from the end,
  // ops that a gradient reached (retained above, so .grad() says which).
  Json backward = Json::array(), forward = Json::array();
  size_t ops = 0;
  for (size_t i = 0; i < p.order.size(); ++i)
    if (!p.order[i].is_leaf()) {
      forward.push_back(i);
      ++ops;
    }
  for (size_t i = p.order.size(); i-- > 0;)
    if (!p.order[i].is_leaf() && p.order[i].grad().defined()) backward.push_back(i);

  Trace t;
  t.title = opt.title;
  t.nodes = p.order.size();
  t.ops = ops;
  t.loss = static_cast<double>(p.loss.item());
  DotOptions dot;
  dot.show_parameters = opt.show_leaves;
  t.dot = dot_string(p.loss, dot);

  Json doc{{"format", "qkv-trace"},
           {"version", 1},
           {"title", opt.title},
           {"description", opt.description},
           {"precision", precision_name()},
           {"loss", p.order.size() - 1},
           {"loss_value", t.loss},
           {"nodes", nodes},
           {"forward_order", forward},
           {"backward_order", backward}};
  // The nudges leave every leaf as it was, and the recorded graph alone
  // holds the values above, so this comes last.
  if (opt.finite_differences) {
    FdSummary fd = finite_differences(p, loss_fn, opt);
    doc["finite_differences"] = fd.json;
    t.fd_checked = fd.checked;
    t.fd_failed = fd.failed;
    t.fd_retried = fd.retried;
    t.fd_max_rel_err = fd.max_rel;
  } else {
    doc["finite_differences"] = nullptr;
  }
  // Release what backward saved (the graph was retained to read it).
  for (Var& v : p.order)
    if (const auto& fn = v.grad_fn()) {
      fn->release_saved();
      fn->released = true;
    }
  t.json = doc.dump();
  return t;
}

}  // namespace qkv::explorer
