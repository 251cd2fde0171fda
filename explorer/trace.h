// The gradient explorer's trace: one forward and backward pass of any model,
// recorded as data a page or another tool can read (docs/trace-format.md):
// the graph (every variable, the op that made it, its module path, its
// inputs), every value and gradient, each op's forward formula and backward
// rule (Node::doc()), the order the engine ran the backward in, tensors an
// op saved that a learner wants to see (attention's P, Node::inspect()), and
// central finite differences of the loss for the leaves' gradients.
//
//   nn::Seq2SeqTransformer model(cfg);  model.eval();
//   explorer::TraceOptions opt;
//   opt.title = "reverse, 2+2 layers";
//   explorer::Trace t = explorer::record_trace(
//       [&] { return nn::cross_entropy(model.forward(src, tgt_in), tgt_out, 0); }, &model, opt);
//   explorer::write_page({t}, "explain.html");   // explorer/page.h
//   std::ofstream("trace.json") << t.json;       // the same data, for other tools
//
// record_trace calls `loss_fn` once to record the graph (with every value
// kept, every intermediate's gradient retained and the modules recorded, see
// below) and backward from it, then, for the finite differences, again and
// again under NoGradGuard with one element of one leaf nudged by +-h. So
// loss_fn must be deterministic (dropout off: model.eval()), must build its
// graph from the same leaf Vars each time (the model's parameters and any
// input Var it captures), and must return a one-element Var. The leaves'
// values are restored exactly; their .grad() holds this pass's gradient
// afterwards (earlier gradients are cleared first).
//
// Precision: everything in a trace is computed in qkv::real, the precision
// the library was built with; the trace says which ("precision"). Finite
// differences are a proof only in the float64 build (build/rel-f64, where
// the relative error of a correct gradient is ~1e-9); in float32 they are
// marked as float32 noise. Programs that explain a float32 model build
// against the float64 library and load the float32 weights into it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/var.h"
#include "nn/module.h"

namespace qkv::explorer {

// Labels for the two axes of an attention op's P (B,H,T,S): one per query
// position (T) and one per key position (S). Empty: positions are numbered.
struct AttentionAxes {
  std::vector<std::string> queries, keys;
};

struct TraceOptions {
  std::string title;        // "Part 2: a 1+1-layer Transformer"
  std::string description;  // a paragraph the page shows above the graph (plain text)
  // Finite differences of the loss for the leaves' gradients (parameters and
  // inputs that require grad): every element of a leaf with at most
  // fd_every_element_up_to elements (-1: of every leaf), else a sample: the
  // fd_largest elements of largest |gradient| and fd_random others drawn
  // with fd_seed. A check passes when |engine - fd| <= fd_atol + fd_rtol * |fd|.
  bool finite_differences = true;
  int64_t fd_every_element_up_to = -1;
  int fd_largest = 16, fd_random = 16;
  uint64_t fd_seed = 1;
#ifdef QKV_DOUBLE
  // h near cbrt(machine epsilon), where the central difference's truncation
  // (h^2) and rounding (eps / h) errors balance; tolerances as gradcheck's.
  double fd_step = 1e-5, fd_atol = 1e-6, fd_rtol = 1e-5;
  // A check that fails is taken again at fd_step / 10, then / 100 (a ReLU's
  // kink within h of an input bends L inside the interval; a wrong gradient
  // fails at every step). At 1e-7 the rounding error eps / h is still ~1e-9.
  int fd_retries = 2;
#else
  double fd_step = 1e-2, fd_atol = 1e-2, fd_rtol = 1e-2;  // float32: noise, not a proof
  int fd_retries = 0;                                     // a smaller step only adds float32's rounding noise
#endif
  // Token labels for attention ops, given the op's module path
  // ("decoder.layers.0.cross_attn") and its T and S. Unset: none.
  std::function<AttentionAxes(const std::string& module, int64_t T, int64_t S)> attention_tokens;
  // Draw every leaf as a node of its own (else a leaf read by one op is
  // listed in that op's box, as --dot does).
  bool show_leaves = false;
};

// A recorded pass. `json` is the trace itself (docs/trace-format.md); the
// rest is a summary of it, and the graph in Graphviz DOT for the page.
struct Trace {
  std::string json;
  std::string dot;  // write_dot of the graph; its node "v<i>" is the trace's node i
  std::string title;
  size_t nodes = 0;  // variables in the graph
  size_t ops = 0;    // of which made by an op
  double loss = 0;
  int64_t fd_checked = 0;  // finite-difference checks made
  int64_t fd_failed = 0;   // of which outside the tolerance
  int64_t fd_retried = 0;  // passed, but only at a smaller step than fd_step
  double fd_max_rel_err =
      0;  // worst |engine - fd| / max(|engine|, |fd|) over checks with |fd| > fd_atol
};

// Records one forward and backward pass of loss_fn (see the top of this
// file). `model` names the parameters ("decoder.layers.0.norm3.weight"); it
// may be null, and leaves that are no parameter of it keep Var::name() (or
// "input"). Parameters without a Var::name() get their dotted name as one. Throws qkv::Error when
// loss_fn's result is not one element or does not require grad.
Trace record_trace(const std::function<Var()>& loss_fn, const nn::Module* model,
                   const TraceOptions& options = {});

// "float64" or "float32": the precision this library computes in.
const char* precision_name();

}  // namespace qkv::explorer
