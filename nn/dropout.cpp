#include "nn/dropout.h"

#include <cmath>
#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/error.h"
#include "core/parallel.h"

namespace qkv::nn {

namespace {
void check_p(real p, const char* op) {
  if (!(p >= 0 && p < 1))
    throw Error(std::string(op) + ": p must be in [0, 1), got " + std::to_string(p));
}
}  // namespace

// Saved: the mask m (x's shape), holding 0 for dropped and 1 / (1 - p) for kept elements.
struct DropoutNode : Node {
  Tensor mask;
  const char* name() const override { return "dropout"; }
  OpDoc doc() const override {
    return {"y = x * m,  m = 0 (dropped) or 1/(1-p) (kept)", "dx = dy * m",
            "docs/forward-pass.md#3-dropout-dropout"};
  }
  // y = x * m  =>  dx = dy * m
  TensorList backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(g.shape());
    const real* __restrict gp = g.data();
    const real* __restrict mp = mask.data();
    real* __restrict dp = dx.data();
    parallel_for(g.numel(), [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) dp[i] = gp[i] * mp[i];
    });
    return {dx};
  }
  void release_saved() override { mask = Tensor(); }
};

Var dropout(const Var& x, real p, Generator& g) {
  check_p(p, "dropout");
  if (p == 0) return x;
  const Tensor& X = x.data();
  const int64_t n = X.numel();
  // The mask is drawn serially: one generator stream, so a seed fixes the mask.
  Tensor mask = Tensor::empty(X.shape());
  real* __restrict mp = mask.data();
  const real keep_scale = static_cast<real>(1.0 / (1.0 - static_cast<double>(p)));
  // Dropped where g.uniform() < p, that is where the top 53 bits k of the
  // draw (uniform() = k 2^-53) are below p 2^53, an integer compare: k < t
  // <=> k < ceil(t) for an integer k, and p 2^53 < 2^53 is exact. The same
  // masks as comparing doubles, without a conversion an element.
  const uint64_t drop_below = static_cast<uint64_t>(std::ceil(static_cast<double>(p) * 0x1.0p53));
  for (int64_t i = 0; i < n; ++i) mp[i] = (g.next_u64() >> 11) < drop_below ? real(0) : keep_scale;
  Tensor Y = Tensor::empty(X.shape());
  const real* __restrict xp = X.data();
  real* __restrict yp = Y.data();
  parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) yp[i] = xp[i] * mp[i];
  });
  auto node = make_node<DropoutNode>();
  node->mask = mask;
  return make_result(Y, node, {x});
}

Dropout::Dropout(real p_, Generator& g) : p(p_), gen_(&g) { check_p(p, "Dropout"); }

Var Dropout::forward(const Var& x) const {
  ModuleScope scope(this);
  if (!is_training() || p == 0) return x;
  return dropout(x, p, *gen_);
}

}  // namespace qkv::nn
