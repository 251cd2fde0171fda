// The position-wise feed-forward block, read top to bottom:
//   1. the maths: forward, and the backward by the chain rule
//   2. feed_forward_forward    the forward kernel: two linear maps around act
//   3. feed_forward_backward   the backward kernel
//   4. FeedForwardNode         the autograd adapter around the two kernels
//   5. feed_forward            the public op
//   6. nn::FeedForward         the module holding linear1 and linear2
#include "nn/feedforward.h"
#include "nn/linear.h"

#include <algorithm>
#include <memory>

#include "autograd/node.h"
#include "core/elementwise.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/reduce.h"
#include "core/thread_scratch.h"

namespace qkv::nn {

// ============================================================================
// 1. The maths
// ============================================================================
// The input x (..., D) is read as N rows of D (N = product of the leading
// dims). F is the hidden width, d_ff in the paper (4 D there: 2048 for
// D = 512). W1 (F, D), b1 (F), W2 (D, F), b2 (D):
//   pre = x W1^T + b1      (N, D) x (D, F) -> (N, F)
//   h   = act(pre)         (N, F), act = ReLU or GELU, elementwise
//   y   = h W2^T + b2      (N, F) x (F, D) -> (N, D)
// Backward, given dy = dL/dy (N, D), the chain rule from the back:
//   dW2 = dy^T h           (D, N) x (N, F) -> (D, F)
//   db2 = sum over rows of dy
//   dh  = dy W2            (N, D) x (D, F) -> (N, F)
//   dpre = dh * act'(pre)  elementwise; relu'(pre) = 1 where pre > 0, else 0
//   dW1 = dpre^T x         (F, N) x (N, D) -> (F, D)
//   db1 = sum over rows of dpre
//   dx  = dpre W1          (N, F) x (F, D) -> (N, D)
// What backward needs: x, W1, W2 and h (N, F). ReLU's derivative is read off
// h (pre > 0 exactly where h > 0), so ReLU keeps no pre; GELU also keeps pre
// (N, F), since gelu'(pre) cannot be read off h.

// ============================================================================
// 2. Forward kernel
// ============================================================================

namespace {
// The hidden layer, as backward needs it: h = act(pre) (N, F), and for GELU
// the pre-activation pre (N, F) as well (undefined for ReLU).
struct Hidden {
  Tensor pre, h;
};

// h = act(pre), elementwise over pre (N, F). ReLU works in place (h shares
// pre's storage, which nothing else needs); GELU writes a new tensor.
Tensor activate(Tensor& pre, Activation act) {
  const int64_t NF = pre.numel();
  if (act == Activation::ReLU) {
    Tensor h = pre;
    real* __restrict hp = h.data();
    parallel_for(NF, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) hp[i] = hp[i] > 0 ? hp[i] : real(0);
    });
    return h;
  }
  Tensor h = Tensor::empty(pre.shape());
  real* __restrict hp = h.data();
  const real* __restrict pp = pre.data();
  // GELU's erf + exp costs about 8 simple element operations: a thread is
  // worth it at an eighth of the elements.
  parallel_for(
      NF,
      [&](int64_t b, int64_t e) {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) hp[i] = gelu_scalar(pp[i]);
      },
      grain_for(8));
  return h;
}

// y (N, D) = act(x W1^T + b1) W2^T + b2; x (N, D) or (..., D), W1 (F, D),
// b1 (F), W2 (D, F), b2 (D). Returns the hidden layer for backward.
Hidden feed_forward_forward(real* y, const Tensor& x, const Tensor& W1, const real* b1,
                            const Tensor& W2, const real* b2, Activation act) {
  const int64_t F = W1.size(0), D = W1.size(1), N = x.numel() / D;
  Tensor pre = Tensor::empty({N, F});
  linear_forward(x, W1.data(), b1, F, pre.data());  // pre (N,F) = x (N,D) W1^T (D,F) + b1
  Tensor h = activate(pre, act);                    // h (N,F) = act(pre)
  linear_forward(h, W2.data(), b2, D, y);           // y (N,D) = h (N,F) W2^T (F,D) + b2
  return {act == Activation::GELU ? pre : Tensor(), h};
}

// ============================================================================
// 3. Backward kernel
// ============================================================================

// dpre = dh * act'(pre), in place over d (N, F): dh in, dpre out, row by
// row, reading act'(pre) off act_in: h for ReLU, pre for GELU. When db1 (F)
// is not null, db1 = sum over rows of dpre is made in the same pass, so dpre
// is not read again for it: each thread adds the rows it made into its own
// (F) block (ThreadSums), and the blocks are added in thread order at the end.
void activation_backward(real* d, const real* act_in, Activation act, int64_t N, int64_t F,
                         real* db1) {
  real* __restrict dp = d;
  const real* __restrict ap = act_in;
  const bool relu = act == Activation::ReLU;
  const bool want_db1 = db1 != nullptr;
  ThreadSums db1_parts(want_db1 ? F : 0);
  parallel_for(
      N,
      [&](int64_t r0, int64_t r1) {
        real* __restrict acc = want_db1 ? db1_parts.mine() : nullptr;  // (F), this thread's share
        for (int64_t r = r0; r < r1; ++r) {
          real* __restrict dr = dp + r * F;       // (F): row r of dh, then of dpre
          const real* __restrict a = ap + r * F;  // (F)
          if (relu) {
#pragma omp simd
            for (int64_t j = 0; j < F; ++j) dr[j] = a[j] > 0 ? dr[j] : real(0);
          } else {
#pragma omp simd
            for (int64_t j = 0; j < F; ++j) dr[j] *= gelu_grad_scalar(a[j]);
          }
          if (acc)
#pragma omp simd
            for (int64_t j = 0; j < F; ++j) acc[j] += dr[j];
        }
      },
      // a row of GELU's derivative counts as 8 F elements of work (as above)
      grain_for(relu ? F : 8 * F));
  if (want_db1) db1_parts.sum_into(db1);
}

// The gradients of feed_forward_forward for dy (N, D), from what it read and
// kept: x (N, D), W1 (F, D), W2 (D, F) and the hidden layer. Writes dx (N, D),
// dW1 (F, D), db1 (F), dW2 (D, F), db2 (D); any of them may be null (not
// wanted).
void feed_forward_backward(const real* dy, const Tensor& x, const Tensor& W1, const Tensor& W2,
                           const Hidden& hidden, Activation act, real* dx, real* dW1, real* db1,
                           real* dW2, real* db2) {
  const int64_t F = W1.size(0), D = W1.size(1), N = x.numel() / D;
  // One (N, F) buffer holds dh, then dpre in place.
  const bool want_dpre = dx || dW1 || db1;
  Tensor buffer = want_dpre ? Tensor::empty({N, F}) : Tensor();
  real* dh = want_dpre ? buffer.data() : nullptr;  // (N, F)
  // forward: y = h W2^T + b2
  //   dh (N,F) = dy (N,D) W2 (D,F);  dW2 = dy^T h;  db2 = sum over rows of dy
  linear_backward(dy, hidden.h, W2.data(), D, dh, dW2, db2);
  if (!want_dpre) return;
  // forward: h = act(pre)
  //   dpre = dh * act'(pre), in place over dh; and db1 = sum over rows of dpre
  const bool relu = act == Activation::ReLU;
  activation_backward(dh, relu ? hidden.h.data() : hidden.pre.data(), act, N, F, db1);
  const real* dpre = dh;  // (N, F)
  // forward: pre = x W1^T + b1
  //   dx (N,D) = dpre (N,F) W1 (F,D);  dW1 = dpre^T x
  linear_backward(dpre, x, W1.data(), F, dx, dW1, nullptr);
}
}  // namespace

// ============================================================================
// 4. The autograd adapter
// ============================================================================

namespace {
// Inputs (x, w1, b1, w2, b2), or (x, w1, w2) without biases. Saved: x (..., D), W1 (F, D), W2 (D,
// F) and the hidden layer (section 2).
struct FeedForwardNode : Node {
  Tensor x, w1, w2;  // (..., D), (F, D), (D, F)
  Hidden hidden;
  Activation act = Activation::ReLU;
  bool has_bias = true;
  const char* name() const override { return "feed_forward"; }
  OpDoc doc() const override {
    return {"y = h W2^T + b2,  h = act(pre),  pre = x W1^T + b1",
            "dh = dy W2,  dpre = dh * act'(pre),  dx = dpre W1,  dW2 = dy^T h,  dW1 = dpre^T x,  "
            "db2 = colsum(dy),  db1 = colsum(dpre)",
            "docs/feedforward-backward.md#the-feed-forward-block-backward-step-by-step"};
  }

  TensorList backward(const Tensor& dy) override {
    const int64_t F = w1.size(0), D = w1.size(1);
    // input indices: x 0, w1 1, (b1 2), w2 2 or 3, (b2 4)
    const size_t i_w2 = has_bias ? 3 : 2;
    Tensor dx = needs_grad(0) ? Tensor::empty(x.shape()) : Tensor();
    Tensor dw1 = needs_grad(1) ? Tensor::empty(w1.shape()) : Tensor();
    Tensor db1 = has_bias && needs_grad(2) ? Tensor::empty({F}) : Tensor();
    Tensor dw2 = needs_grad(i_w2) ? Tensor::empty(w2.shape()) : Tensor();
    Tensor db2 = has_bias && needs_grad(4) ? Tensor::empty({D}) : Tensor();
    auto ptr = [](Tensor& t) { return t.defined() ? t.data() : nullptr; };
    feed_forward_backward(dy.data(), x, w1, w2, hidden, act, ptr(dx), ptr(dw1), ptr(db1), ptr(dw2),
                          ptr(db2));
    if (!has_bias) return {dx, dw1, dw2};
    return {dx, dw1, db1, dw2, db2};
  }
  void release_saved() override { x = w1 = w2 = hidden.pre = hidden.h = Tensor(); }
};
}  // namespace

// ============================================================================
// 5. The public op
// ============================================================================

Var feed_forward(const Var& x, const Var& w1, const Var& b1, const Var& w2, const Var& b2,
                 Activation act) {
  const Tensor& X = x.data();    // (..., D)
  const Tensor& W1 = w1.data();  // (F, D)
  const Tensor& W2 = w2.data();  // (D, F)
  if (W1.dim() != 2 || W2.dim() != 2 || X.dim() < 1 || X.size(-1) != W1.size(1) ||
      W2.size(0) != W1.size(1) || W2.size(1) != W1.size(0))
    throw Error("feed_forward: input " + to_string(X.shape()) + ", w1 " + to_string(W1.shape()) +
                ", w2 " + to_string(W2.shape()) +
                ": expected input (..., D), w1 (F, D) and w2 (D, F)");
  const int64_t F = W1.size(0), D = W1.size(1);
  if (F == 0 || D == 0)
    throw Error("feed_forward: w1 " + to_string(W1.shape()) + " has an empty dimension");
  if (act != Activation::ReLU && act != Activation::GELU)
    throw Error(std::string("feed_forward: activation ") + activation_name(act) +
                " is a block of its own (nn::swiglu), not an activation of this op");
  // Both biases, or neither (a block without biases, --no-bias).
  const bool has_bias = b1.defined() || b2.defined();
  if (has_bias &&
      (!b1.defined() || !b2.defined() || b1.shape() != Shape{F} || b2.shape() != Shape{D}))
    throw Error("feed_forward: biases must be b1 (" + std::to_string(F) + ") and b2 (" +
                std::to_string(D) + ") or both undefined, got b1 " +
                (b1.defined() ? to_string(b1.shape()) : std::string("undefined")) + " and b2 " +
                (b2.defined() ? to_string(b2.shape()) : std::string("undefined")));

  Tensor Y = Tensor::empty(X.shape());  // (..., D)
  Hidden hidden = feed_forward_forward(Y.data(), X, W1, has_bias ? b1.data().data() : nullptr, W2,
                                       has_bias ? b2.data().data() : nullptr, act);

  auto node = make_node<FeedForwardNode>();
  node->x = X;
  node->w1 = W1;
  node->w2 = W2;
  node->hidden = hidden;
  node->act = act;
  node->has_bias = has_bias;
  if (!has_bias) return make_result(Y, node, {x, w1, w2});
  return make_result(Y, node, {x, w1, b1, w2, b2});
}

// ============================================================================
// 6. The module
// ============================================================================

FeedForward::FeedForward(int64_t D_, int64_t F_, Activation act_, Generator& g, bool bias)
    : D(D_), F(F_), act(act_) {
  if (D <= 0 || F <= 0)
    throw Error("FeedForward: D and F must be positive, got D " + std::to_string(D) + ", F " +
                std::to_string(F));
  if (act != Activation::ReLU && act != Activation::GELU)
    throw Error(std::string("FeedForward: activation ") + activation_name(act) +
                " is a block of its own (nn::SwiGLU; nn::make_ffn builds either)");
  linear1 = register_module("linear1", std::make_shared<Linear>(D, F, bias, g));
  linear2 = register_module("linear2", std::make_shared<Linear>(F, D, bias, g));
}

void FeedForward::report_hidden(const Tensor& x) const {
  const Tensor& b1 = linear1->bias.defined() ? linear1->bias.data() : Tensor();
  Tensor pre = Tensor::empty({x.numel() / D, F});  // (N, F) = x (N, D) W1^T (D, F) + b1
  linear_forward(x, linear1->weight.data().data(), b1.defined() ? b1.data() : nullptr, F,
                 pre.data());
  Tensor work = pre.clone();  // ReLU's activate works in place
  probe()->ffn_hidden(*this, pre, activate(work, act), act);
}

}  // namespace qkv::nn
