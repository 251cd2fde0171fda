#include "nn/feedforward.h"
#include "nn/linear.h"

#include <algorithm>
#include <memory>

#include "autograd/node.h"
#include "core/elementwise.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/reduce.h"

namespace qkv::nn {


// Saved: x (N, D), W1 (F, D), W2 (D, F), and the hidden activations h = act(pre)
// (N, F). ReLU's derivative is read off h (pre > 0 exactly where h > 0); GELU also
// keeps the pre-activation pre (N, F), since gelu'(pre) cannot be read off h.
struct FeedForwardNode : Node {
  Tensor x, w1, w2, pre, h;
  Activation act = Activation::ReLU;
  const char* name() const override { return "feed_forward"; }

  // y = h W2^T + b2 with h = act(pre), pre = x W1^T + b1. Chain rule, back to front:
  // dW2 = dy^T h; db2 = sum_rows(dy); dh = dy W2; dpre = dh * act'(pre);
  // dx = dpre W1; dW1 = dpre^T x; db1 = sum_rows(dpre).
  TensorList backward(const Tensor& g) override {
    const int64_t F = w1.size(0), D = w1.size(1), N = x.numel() / D;
    auto ptr = [](Tensor& t) { return t.defined() ? t.data() : nullptr; };
    const bool want_dpre = needs_grad(0) || needs_grad(1) || needs_grad(2);
    Tensor dx = needs_grad(0) ? Tensor::empty(x.shape()) : Tensor();
    Tensor dw1 = needs_grad(1) ? Tensor::empty(w1.shape()) : Tensor();
    Tensor db1 = needs_grad(2) ? Tensor::empty({F}) : Tensor();
    Tensor dw2 = needs_grad(3) ? Tensor::empty(w2.shape()) : Tensor();
    Tensor db2 = needs_grad(4) ? Tensor::empty({D}) : Tensor();
    // Second linear: dh = dy W2 (N,D)x(D,F), written into dpre; dW2 = dy^T h; db2.
    Tensor dpre = want_dpre ? Tensor::empty({N, F}) : Tensor();
    linear_backward(g.data(), h, w2.data(), D, ptr(dpre), false, ptr(dw2), ptr(db2));
    if (want_dpre) {
      // dpre = dh * act'(pre), in place, row by row; in the same pass each
      // thread adds the rows it made into its own row of `partial` (threads, F)
      // for db1 = sum_rows(dpre), so dpre is not read again just for that.
      real* __restrict dp = dpre.data();
      const bool relu = act == Activation::ReLU;
      const real* __restrict ap = relu ? h.data() : pre.data();
      const bool want_db1 = db1.defined();
      const ThreadSlots slots;
      Tensor partial = want_db1 ? Tensor::zeros({slots.count(), F}) : Tensor();
      parallel_for(
          N,
          [&](int64_t r0, int64_t r1) {
            real* __restrict acc = want_db1 ? partial.data() + slots.slot() * F : nullptr;
            for (int64_t r = r0; r < r1; ++r) {
              real* __restrict d = dp + r * F;
              const real* __restrict a = ap + r * F;
              if (relu) {
#pragma omp simd
                for (int64_t j = 0; j < F; ++j) d[j] = a[j] > 0 ? d[j] : real(0);
              } else {
#pragma omp simd
                for (int64_t j = 0; j < F; ++j) d[j] *= gelu_grad_scalar(a[j]);
              }
              if (acc)
#pragma omp simd
                for (int64_t j = 0; j < F; ++j) acc[j] += d[j];
            }
          },
          // GELU's erf + exp per element is worth a thread sooner.
          std::max<int64_t>(1, (relu ? kParallelGrain : kParallelGrain / 8) / F));
      if (want_db1) sum_rows(partial.data(), slots.count(), F, db1.data());
      // First linear: dx = dpre W1 (N,F)x(F,D); dW1 = dpre^T x.
      linear_backward(dp, x, w1.data(), F, ptr(dx), false, ptr(dw1), nullptr);
    }
    return {dx, dw1, db1, dw2, db2};
  }
  void release_saved() override { x = w1 = w2 = pre = h = Tensor(); }
};

Var feed_forward(const Var& x, const Var& w1, const Var& b1, const Var& w2, const Var& b2,
                 Activation act) {
  const Tensor& X = x.data();
  const Tensor& W1 = w1.data();
  const Tensor& W2 = w2.data();
  if (W1.dim() != 2 || W2.dim() != 2 || X.dim() < 1 || X.size(-1) != W1.size(1) ||
      W2.size(0) != W1.size(1) || W2.size(1) != W1.size(0))
    throw Error("feed_forward: input " + to_string(X.shape()) + ", w1 " + to_string(W1.shape()) +
                ", w2 " + to_string(W2.shape()) +
                ": expected input (..., D), w1 (F, D) and w2 (D, F)");
  const int64_t F = W1.size(0), D = W1.size(1);
  if (F == 0 || D == 0)
    throw Error("feed_forward: w1 " + to_string(W1.shape()) + " has an empty dimension");
  const int64_t N = X.numel() / D;
  if (!b1.defined() || !b2.defined() || b1.shape() != Shape{F} || b2.shape() != Shape{D})
    throw Error("feed_forward: biases must be b1 (" + std::to_string(F) + ") and b2 (" +
                std::to_string(D) + "), got b1 " +
                (b1.defined() ? to_string(b1.shape()) : std::string("undefined")) + " and b2 " +
                (b2.defined() ? to_string(b2.shape()) : std::string("undefined")));

  // pre (N,F) = x (N,D) W1^T (D,F) + b1
  Tensor pre = Tensor::empty({N, F});
  linear_forward(X, W1.data(), b1.data().data(), F, pre.data());

  // h (N,F) = act(pre). ReLU works in place (backward reads its mask off h);
  // GELU writes a new tensor, since backward needs pre too.
  Tensor h = act == Activation::ReLU ? pre : Tensor::empty({N, F});
  {
    real* __restrict hp = h.data();
    const int64_t NF = N * F;
    if (act == Activation::ReLU) {
      parallel_for(NF, [&](int64_t b, int64_t e) {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) hp[i] = hp[i] > 0 ? hp[i] : real(0);
      });
    } else {
      const real* __restrict pp = pre.data();
      parallel_for(NF, [&](int64_t b, int64_t e) {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) hp[i] = gelu_scalar(pp[i]);
      }, kParallelGrain / 8);
    }
  }

  // y (N,D) = h (N,F) W2^T (F,D) + b2
  Shape ys = X.shape();
  Tensor Y = Tensor::empty(ys);
  linear_forward(h, W2.data(), b2.data().data(), D, Y.data());

  auto node = make_node<FeedForwardNode>();
  node->x = X;
  node->w1 = W1;
  node->w2 = W2;
  node->h = h;
  node->act = act;
  if (act == Activation::GELU) node->pre = pre;  // ReLU reads its mask off h
  return make_result(Y, node, {x, w1, b1, w2, b2});
}

FeedForward::FeedForward(int64_t D_, int64_t F_, Activation act_, Generator& g)
    : D(D_), F(F_), act(act_) {
  if (D <= 0 || F <= 0)
    throw Error("FeedForward: D and F must be positive, got D " + std::to_string(D) + ", F " +
                std::to_string(F));
  linear1 = register_module("linear1", std::make_shared<Linear>(D, F, true, g));
  linear2 = register_module("linear2", std::make_shared<Linear>(F, D, true, g));
}

}  // namespace qkv::nn
