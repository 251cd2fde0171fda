#include "autograd/gradcheck.h"

#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "core/elementwise.h"
#include "core/error.h"

namespace qkv {

namespace {
// L = sum(y * R), accumulated in double.
double project(const Tensor& y, const Tensor& R) {
  double s = 0;
  for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y.data()[i]) * R.data()[i];
  return s;
}

// Keeps the callers' gradients while gradcheck works with fresh ones, and
// puts them back however it is left (also when f or a backward throws).
struct GradStash {
  const std::vector<Var>& inputs;
  std::vector<Tensor> saved;
  explicit GradStash(const std::vector<Var>& in) : inputs(in) {
    for (const Var& v : inputs) {
      saved.push_back(v.grad());
      v.impl()->grad = Tensor();
    }
  }
  ~GradStash() {
    for (size_t i = 0; i < saved.size(); ++i) inputs[i].impl()->grad = saved[i];
  }
};

// Compares element j of input i: analytic a against the central difference,
// keeping the worst errors and the first failure in res.
void compare(GradcheckResult& res, size_t i, int64_t j, double a, double numeric,
             const GradcheckOptions& opt) {
  const double err = std::fabs(a - numeric);
  const double rel = err / std::max(std::fabs(numeric), 1e-12);
  ++res.checked;
  if (err > res.max_abs_err || std::isnan(err)) res.max_abs_err = err;
  if (err > opt.atol && rel > res.max_rel_err) res.max_rel_err = rel;
  const bool bad = !(err <= opt.atol + opt.rtol * std::fabs(numeric));
  if (bad && res.ok) {
    res.ok = false;
    res.fail_input = static_cast<int>(i);
    res.fail_index = j;
    res.fail_analytic = a;
    res.fail_numeric = numeric;
  }
}

// The one-line report: the verdict, the worst errors, and the first failure
// by input (and its name), shape and element.
std::string report(const GradcheckResult& res, const std::vector<Var>& inputs,
                   const GradcheckOptions& opt) {
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "gradcheck %s: %lld elements, worst abs err %.3g, worst rel err (above atol) %.3g "
                "(eps %.0e, atol %.0e, rtol %.0e, %s)",
                res.ok ? "passed" : "FAILED", static_cast<long long>(res.checked), res.max_abs_err,
                res.max_rel_err, opt.eps, opt.atol, opt.rtol, real_name);
  os << buf;
  if (!res.ok) {
    const Var& v = inputs[res.fail_input];
    std::snprintf(
        buf, sizeof buf,
        "; first failure: input %d%s%s shape %s element %lld: analytic %.10g vs numeric %.10g",
        res.fail_input, v.name().empty() ? "" : " ", v.name().c_str(), to_string(v.shape()).c_str(),
        static_cast<long long>(res.fail_index), res.fail_analytic, res.fail_numeric);
    os << buf;
  }
  return os.str();
}

}  // namespace

GradcheckResult gradcheck(const std::function<Var(const std::vector<Var>&)>& f,
                          const std::vector<Var>& inputs, const GradcheckOptions& opt) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined() || !inputs[i].is_leaf())
      throw Error("gradcheck: input " + std::to_string(i) + " must be a defined leaf Var");

  // Keep the callers' gradients; check with fresh ones.
  GradStash stash(inputs);

  // Analytic: one backward of L = sum(y * R).
  Var y = f(inputs);
  Generator gen(opt.seed);
  const Tensor R = Tensor::normal(y.shape(), 0, 1, gen);
  if (!y.requires_grad())
    throw Error("gradcheck: the output does not depend on any input that requires grad");
  y.backward(R);
  std::vector<Tensor> analytic;
  for (const Var& v : inputs) analytic.push_back(v.grad());

  GradcheckResult res;
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].requires_grad()) continue;
      Var x = inputs[i];
      real* p = x.data().data();
      for (int64_t j = 0; j < x.numel(); ++j) {
        const real orig = p[j];
        p[j] = static_cast<real>(orig + opt.eps);
        const double lp = project(f(inputs).data(), R);
        p[j] = static_cast<real>(orig - opt.eps);
        const double lm = project(f(inputs).data(), R);
        p[j] = orig;
        const double numeric = (lp - lm) / (2 * opt.eps);
        // An input never reached by backward has gradient 0.
        const double a = analytic[i].defined() ? static_cast<double>(analytic[i].data()[j]) : 0.0;
        compare(res, i, j, a, numeric, opt);
      }
    }
  }
  res.report = report(res, inputs, opt);
  return res;
}

std::ostream& operator<<(std::ostream& os, const GradcheckResult& r) { return os << r.report; }

}  // namespace qkv
