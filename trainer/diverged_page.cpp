#include "trainer/diverged_page.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "explorer/program.h"
#include "io/output_file.h"
#include "trainer/plots.h"

namespace qkv::train {

namespace {

using plots::xml_escape;

std::string num(double x) {
  if (std::isnan(x)) return "&mdash;";  // no finite number to summarise
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", x);
  return b;
}

const char* kCell = "border-bottom:1px solid #ddd;padding:.25em .6em;text-align:right";

// A count of non-finite numbers, red when there are any.
std::string count_cell(int64_t n) {
  return std::string("<td style='") + kCell + (n ? ";color:#b00;font-weight:bold'>" : "'>") +
         std::to_string(n) + "</td>";
}

// The statistics table: one row per tensor.
std::string stats_table(const std::vector<std::pair<std::string, TensorStats>>& rows) {
  std::ostringstream h;
  h << "<table style='border-collapse:collapse;font-size:.92em'>\n<tr style='background:#eee'>";
  for (const char* c :
       {"tensor", "shape", "min", "max", "mean", "std", "largest |x|", "NaN", "+Inf", "-Inf"})
    h << "<th style='" << kCell << ";white-space:nowrap'>" << c << "</th>";
  h << "</tr>\n";
  for (const auto& [role, s] : rows) {
    const bool bad = !s.finite();
    h << "<tr" << (bad ? " style='background:#fde8e8'" : "") << "><td style='" << kCell
      << ";text-align:left'>" << xml_escape(role) << "</td><td style='" << kCell << "'>"
      << to_string(s.shape) << "</td>";
    if (s.freed) {
      h << "<td colspan='8' style='" << kCell
        << ";text-align:left;color:#666'>values freed before backward</td></tr>\n";
      continue;
    }
    for (double x : {s.min, s.max, s.mean, s.std, s.max_abs})
      h << "<td style='" << kCell << "'>" << num(x) << "</td>";
    h << count_cell(s.nan) << count_cell(s.pos_inf) << count_cell(s.neg_inf) << "</tr>\n";
  }
  h << "</table>\n";
  return h.str();
}

std::string op_where(const AnomalyError& e) {
  return e.module.empty() ? std::string("outside any module, or in the top-level module")
                          : "in module <code>" + xml_escape(e.module) + "</code>";
}

// The op's rules and the link to the docs/ page that derives them.
std::string rule_section(const AnomalyError& e, const std::string& docs_base) {
  std::ostringstream h;
  h << "<h2>Its backward rule</h2>\n";
  if (e.backward_rule.empty() && e.page.empty()) {
    h << "<p><code>" << xml_escape(e.op)
      << "</code> gives no rule and no docs page: it is an op written outside the library "
         "(its <code>Node::doc()</code> is empty; docs/custom-ops.md says how to give one).</p>\n";
    return h.str();
  }
  if (!e.forward_rule.empty())
    h << "<p>forward: <code>" << xml_escape(e.forward_rule) << "</code></p>\n";
  if (!e.backward_rule.empty())
    h << "<p>backward: <code>" << xml_escape(e.backward_rule) << "</code></p>\n";
  if (!e.page.empty()) {
    const std::string rel = e.page.rfind("docs/", 0) == 0 ? e.page.substr(5) : e.page;
    h << "<p>derived in ";
    if (docs_base.empty())
      h << "<code>" << xml_escape(e.page) << "</code> (in the qkv source tree)";
    else
      h << "<a href='" << xml_escape(docs_base + rel) << "'>" << xml_escape(e.page) << "</a>";
    h << "</p>\n";
  }
  return h.str();
}

std::string operands_section(const AnomalyError& e) {
  std::vector<std::pair<std::string, TensorStats>> rows;
  for (const AnomalyOperand& o : e.operands) rows.emplace_back(o.role, o.stats);
  if (rows.empty()) return "";
  return "<h2>What it read and what it made</h2>\n" + stats_table(rows) +
         "<p style='color:#555;font-size:.9em'>min, max, mean, std and largest |x| are over each "
         "tensor's finite numbers (&mdash; when it has none). " +
         (e.backward && e.operands.back().role.rfind("summed", 0) == 0
              ? std::string("In backward the inputs are the op's forward inputs. The gradient "
                            "this op returned was finite; its sum with the gradients from the "
                            "variable's other uses overflowed.")
          : e.backward
              ? std::string("In backward the inputs are the op's forward inputs, and the "
                            "gradient of the output is what backward was given: finite, so this "
                            "op made the non-finite gradient, it did not pass one on.")
              : std::string("Every input was checked when it was made (and a leaf before the op "
                            "ran), so a non-finite output is this op's own.")) +
         "</p>\n";
}

}  // namespace

std::string DivergedStep::said() const {
  switch (cause) {
    case Cause::Op:
      return std::string("the first op whose ") + (anomaly->backward ? "gradient" : "output") +
             " was not finite: " + anomaly->what();
    case Cause::Weights: {
      std::string s = "the weight " + bad_params.front().first;
      if (bad_params.size() > 1) s += " (and " + std::to_string(bad_params.size() - 1) + " more)";
      s += " already held a NaN or Inf before this step's forward, so the optimizer's update of "
           "an earlier step made it";
      return anomaly ? s + ": " + anomaly->what() : s;
    }
    case Cause::Input:
      return "an input the forward read (no parameter) held a NaN or Inf: " +
             std::string(anomaly->what());
    case Cause::Optimizer:
      break;
  }
  char b[400];
  std::snprintf(b, sizeof b,
                "no op made a NaN or Inf in this step's forward or backward (the loss %.4g is "
                "finite): the weights the optimizer's earlier updates grew made it explode",
                loss);
  std::string s = b;
  if (!largest_params.empty()) {
    std::snprintf(b, sizeof b, "; the largest, %s, has |w| up to %.4g",
                  largest_params.front().first.c_str(), largest_params.front().second.max_abs);
    s += b;
  }
  return s;
}

DivergedStep diverged_at_op(const AnomalyError& e, int64_t step) {
  DivergedStep d;
  d.step = step;
  d.cause = !e.backward && e.input >= 0 ? DivergedStep::Cause::Input : DivergedStep::Cause::Op;
  d.anomaly = e;
  return d;
}

std::string diverged_page_html(const DivergedStep& d, const std::string& docs_base) {
  std::ostringstream h;
  const std::string step = std::to_string(d.step);
  h << "<!doctype html>\n<html><head><meta charset='utf-8'><title>qkv: step " << step
    << " diverged</title></head>\n"
       "<body style='font-family:sans-serif;max-width:62em;margin:1.5em auto;padding:0 1em;"
       "line-height:1.45'>\n<h1>Step "
    << step << " diverged: which op made the first NaN or Inf</h1>\n";
  h << "<p style='background:#fff6dd;border:1px solid #e0b84c;padding:.6em .8em'>Written by the "
       "float32 process that diverged. <b>There is no float64 finite-difference proof here</b>: "
       "the numbers are this process's float32 values"
    << (d.cause == DivergedStep::Cause::Op && !d.anomaly->backward_rule.empty()
            ? ", and the backward rule below is the one the op implements (proven in float64 by "
              "qkv's tests, not on these numbers)"
            : "")
    << ".</p>\n";
  if (!d.stopped.empty())
    h << "<h2>What stopped the run</h2>\n<p><code>" << xml_escape(d.stopped) << "</code></p>\n";
  h << "<h2>What the rerun found</h2>\n";
  const AnomalyError* e = d.anomaly ? &*d.anomaly : nullptr;
  switch (d.cause) {
    case DivergedStep::Cause::Op:
      h << "<p style='font-size:1.15em'>The first value that was not finite was made by the "
        << (e->backward ? "<b>backward</b>" : "<b>forward</b>") << " of <b><code>"
        << xml_escape(e->op) << "</code></b>, " << op_where(*e) << ", at step " << step << ": "
        << (e->backward ? "the gradient it returned for its input " + std::to_string(e->input)
                        : std::string("its output"))
        << ".</p>\n<p><code>" << xml_escape(e->what()) << "</code></p>\n"
        << operands_section(*e) << rule_section(*e, docs_base);
      break;
    case DivergedStep::Cause::Weights: {
      h << "<p style='font-size:1.15em'>No op made it: the weight <b><code>"
        << xml_escape(d.bad_params.front().first)
        << "</code></b> already held a NaN or Inf before step " << step
        << "'s forward. The <b>optimizer's update</b> of an earlier step made it; the steps "
           "before only checked the loss and the gradient norm, which were finite.</p>\n"
           "<h2>The parameters holding a NaN or Inf</h2>\n"
        << stats_table(d.bad_params);
      if (e)
        h << "<p>The first op that read one: <code>" << xml_escape(e->what()) << "</code></p>\n";
      break;
    }
    case DivergedStep::Cause::Input:
      h << "<p style='font-size:1.15em'>No op made it: an input the forward read, no parameter "
           "(the batch's data), already held a NaN or Inf.</p>\n<p><code>"
        << xml_escape(e->what()) << "</code></p>\n"
        << operands_section(*e);
      break;
    case DivergedStep::Cause::Optimizer:
      h << "<p style='font-size:1.15em'><b>No op made a NaN or Inf</b> in step " << step
        << "'s forward or backward: the rerun's loss, " << num(d.loss)
        << ", is finite. The <b>optimizer's updates</b> of the steps before grew the weights "
           "until the loss exploded on finite numbers (a learning rate too high for this model, "
           "or no warmup or clipping).</p>\n";
      if (!d.largest_params.empty())
        h << "<h2>The weights the updates grew furthest</h2>\n<p>The parameters of largest "
             "|w| before the step; compare them with their scale at the start (a weight "
             "matrix's about 1/sqrt(D), a norm's gain 1).</p>\n"
          << stats_table(d.largest_params);
      break;
  }
  h << "<h2>How this was found</h2>\n<p>The step threw before the optimizer's update (the loss "
       "and the gradient norm are checked first), so the weights and the optimizer's state were "
       "those before the step. The trainer kept the two random streams' states from before the "
       "step (the batch's and dropout's), set them back, and ran the same forward and backward "
       "again with detect-anomaly mode on, which checks every op's output as it is made and "
       "every gradient an op returns, and stops at the first NaN or Inf "
       "(<code>autograd/anomaly.h</code>; docs/instruments.md, &ldquo;Which op made this "
       "NaN&rdquo;).</p>\n</body></html>\n";
  return h.str();
}

std::string write_diverged_page(const DivergedStep& d, const std::string& dir) {
  const std::string path = dir + "/diverged.html";
  write_file_atomically(path, "diverged page: " + brief(path),
                        diverged_page_html(d, explorer::docs_url_beside_build()));
  return path;
}

}  // namespace qkv::train
