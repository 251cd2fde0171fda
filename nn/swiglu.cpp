// The SwiGLU feed-forward block, read top to bottom (the order of
// nn/feedforward.cpp):
//   1. the maths: forward, and the backward by the chain rule
//   2. swiglu_forward     the forward kernel: two projections, the gate, one more
//   3. swiglu_backward    the backward kernel
//   4. SwiGLUNode         the autograd adapter around the two kernels
//   5. swiglu             the public op
//   6. nn::SwiGLU         the module holding gate, up and down
#include "nn/swiglu.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/fast_math.h"
#include "core/parallel.h"

namespace qkv::nn {

// ============================================================================
// 1. The maths
// ============================================================================
// The input x (..., D) is read as N rows of D. F is the hidden width.
// Wg, Wu (F, D), Wd (D, F):
//   a = x Wg^T             (N, D) x (D, F) -> (N, F)   the gate's input
//   u = x Wu^T             (N, D) x (D, F) -> (N, F)   the up projection
//   h = silu(a) * u        (N, F), elementwise: silu(a) = a s, s = sigmoid(a)
//   y = h Wd^T             (N, F) x (F, D) -> (N, D)
// Backward, given dy = dL/dy (N, D), the chain rule from the back:
//   dWd = dy^T h           (D, N) x (N, F) -> (D, F)
//   dh  = dy Wd            (N, D) x (D, F) -> (N, F)
//   du  = dh * silu(a)     (h = silu(a) u is linear in u)
//   da  = dh * u * silu'(a),  silu'(a) = s + a s (1 - s) = s (1 + a (1 - s))
//         (product rule on a s, with ds/da = s (1 - s))
//   dWg = da^T x,  dWu = du^T x          (F, N) x (N, D) -> (F, D)
//   dx  = da Wg + du Wu    (N, F) x (F, D) -> (N, D), both paths from x summed
// What backward needs: x, the three weights, a and u (N, F each). h is
// remade from a and u (one sigmoid per element), which saves a third (N, F)
// buffer.

namespace {

inline real sigmoid_scalar(real a) { return real(1) / (real(1) + fast_exp(-a)); }

// ============================================================================
// 2. Forward kernel
// ============================================================================

// h (N, F) = silu(a) * u, elementwise.
void gate_forward(real* h_, const real* a_, const real* u_, int64_t NF) {
  real* __restrict h = h_;
  const real* __restrict a = a_;
  const real* __restrict u = u_;
  // a sigmoid costs about as much as 8 simple element operations
  parallel_for(
      NF,
      [&](int64_t b, int64_t e) {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) h[i] = a[i] * sigmoid_scalar(a[i]) * u[i];
      },
      grain_for(8));
}

// What backward reads: the gate's input a and the up projection u (N, F).
struct Gate {
  Tensor a, u;
};

// y (N, D) = (silu(x Wg^T) * (x Wu^T)) Wd^T. Returns a and u for backward.
Gate swiglu_forward(real* y, const Tensor& x, const Tensor& Wg, const Tensor& Wu,
                    const Tensor& Wd) {
  const int64_t F = Wg.size(0), D = Wg.size(1), N = x.numel() / D;
  Gate g{Tensor::empty({N, F}), Tensor::empty({N, F})};
  linear_forward(x, Wg.data(), nullptr, F, g.a.data());  // a (N,F) = x (N,D) Wg^T (D,F)
  linear_forward(x, Wu.data(), nullptr, F, g.u.data());  // u (N,F) = x (N,D) Wu^T (D,F)
  Tensor h = Tensor::empty({N, F});
  gate_forward(h.data(), g.a.data(), g.u.data(), N * F);  // h = silu(a) * u
  linear_forward(h, Wd.data(), nullptr, D, y);            // y (N,D) = h (N,F) Wd^T (F,D)
  return g;
}

// ============================================================================
// 3. Backward kernel
// ============================================================================

// From dh (N, F): da = dh * u * silu'(a), written over dh (each element is
// read before it is written), du = dh * silu(a), and h = silu(a) * u (for
// dWd), in one pass over a and u.
void gate_backward(real* dh_da_, real* du_, real* h_, const real* a_, const real* u_, int64_t NF) {
  real* __restrict d = dh_da_;
  real* __restrict du = du_;
  real* __restrict h = h_;
  const real* __restrict a = a_;
  const real* __restrict u = u_;
  parallel_for(
      NF,
      [&](int64_t b, int64_t e) {
#pragma omp simd
        for (int64_t i = b; i < e; ++i) {
          const real s = sigmoid_scalar(a[i]);
          const real silu = a[i] * s;
          h[i] = silu * u[i];                                   // h = silu(a) u
          du[i] = d[i] * silu;                                  // du = dh * silu(a)
          d[i] = d[i] * u[i] * s * (real(1) + a[i] * (1 - s));  // da = dh u silu'(a)
        }
      },
      grain_for(8));
}

// The gradients of swiglu_forward for dy (N, D). Writes dx (N, D), dWg and
// dWu (F, D), dWd (D, F); any of them may be null (not wanted).
void swiglu_backward(const real* dy, const Tensor& x, const Tensor& Wg, const Tensor& Wu,
                     const Tensor& Wd, const Gate& g, real* dx, real* dWg, real* dWu, real* dWd) {
  const int64_t F = Wg.size(0), D = Wg.size(1), N = x.numel() / D;
  Tensor d = Tensor::empty({N, F}), du = Tensor::empty({N, F}), h = Tensor::empty({N, F});
  // forward: y = h Wd^T.  dh (N,F) = dy (N,D) Wd (D,F)
  gemm(false, false, N, F, D, 1, dy, D, Wd.data(), F, 0, d.data(), F);
  // forward: h = silu(a) * u.  da (over dh), du, and h remade
  gate_backward(d.data(), du.data(), h.data(), g.a.data(), g.u.data(), N * F);
  const real* da = d.data();
  // dWd (D,F) = dy^T (D,N) h (N,F)
  if (dWd) gemm(true, false, D, F, N, 1, dy, D, h.data(), F, 0, dWd, F);
  // forward: a = x Wg^T, u = x Wu^T.  dWg (F,D) = da^T (F,N) x (N,D), dWu = du^T x
  if (dWg) gemm(true, false, F, D, N, 1, da, F, x.data(), D, 0, dWg, D);
  if (dWu) gemm(true, false, F, D, N, 1, du.data(), F, x.data(), D, 0, dWu, D);
  // dx (N,D) = da (N,F) Wg (F,D) + du (N,F) Wu (F,D): x feeds both projections
  if (dx) {
    gemm(false, false, N, D, F, 1, da, F, Wg.data(), D, 0, dx, D);
    gemm(false, false, N, D, F, 1, du.data(), F, Wu.data(), D, 1, dx, D);
  }
}
}  // namespace

// ============================================================================
// 4. The autograd adapter
// ============================================================================

namespace {
// Inputs (x, w_gate, w_up, w_down). Saved: x (..., D), the three weights and
// the gate's a and u (N, F each).
struct SwiGLUNode : Node {
  Tensor x, wg, wu, wd;
  Gate gate;
  const char* name() const override { return "swiglu"; }
  OpDoc doc() const override {
    return {"y = h Wd^T,  h = silu(a) * u,  a = x Wg^T,  u = x Wu^T  (silu(a) = a sigmoid(a))",
            "dh = dy Wd,  du = dh * silu(a),  da = dh * u * silu'(a),  dx = da Wg + du Wu,  "
            "dWg = da^T x,  dWu = du^T x,  dWd = dy^T h",
            "docs/swiglu-backward.md#backward-step-by-step"};
  }
  TensorList backward(const Tensor& dy) override {
    Tensor dx = needs_grad(0) ? Tensor::empty(x.shape()) : Tensor();
    Tensor dwg = needs_grad(1) ? Tensor::empty(wg.shape()) : Tensor();
    Tensor dwu = needs_grad(2) ? Tensor::empty(wu.shape()) : Tensor();
    Tensor dwd = needs_grad(3) ? Tensor::empty(wd.shape()) : Tensor();
    auto ptr = [](Tensor& t) { return t.defined() ? t.data() : nullptr; };
    swiglu_backward(dy.data(), x, wg, wu, wd, gate, ptr(dx), ptr(dwg), ptr(dwu), ptr(dwd));
    return {dx, dwg, dwu, dwd};
  }
  void release_saved() override { x = wg = wu = wd = gate.a = gate.u = Tensor(); }
};
}  // namespace

// ============================================================================
// 5. The public op
// ============================================================================

Var swiglu(const Var& x, const Var& w_gate, const Var& w_up, const Var& w_down) {
  const Tensor& X = x.data();        // (..., D)
  const Tensor& Wg = w_gate.data();  // (F, D)
  const Tensor& Wu = w_up.data();    // (F, D)
  const Tensor& Wd = w_down.data();  // (D, F)
  if (Wg.dim() != 2 || Wd.dim() != 2 || X.dim() < 1 || Wu.shape() != Wg.shape() ||
      X.size(-1) != Wg.size(1) || Wd.size(0) != Wg.size(1) || Wd.size(1) != Wg.size(0))
    throw Error("swiglu: input " + to_string(X.shape()) + ", w_gate " + to_string(Wg.shape()) +
                ", w_up " + to_string(Wu.shape()) + ", w_down " + to_string(Wd.shape()) +
                ": expected input (..., D), w_gate and w_up (F, D) and w_down (D, F)");
  if (Wg.size(0) == 0 || Wg.size(1) == 0)
    throw Error("swiglu: w_gate " + to_string(Wg.shape()) + " has an empty dimension");

  Tensor Y = Tensor::empty(X.shape());  // (..., D)
  auto node = make_node<SwiGLUNode>();
  node->gate = swiglu_forward(Y.data(), X, Wg, Wu, Wd);
  node->x = X;
  node->wg = Wg;
  node->wu = Wu;
  node->wd = Wd;
  return make_result(Y, node, {x, w_gate, w_up, w_down});
}

int64_t swiglu_hidden(int64_t d_ff) {
  if (d_ff <= 0) throw Error("swiglu_hidden: d_ff must be positive, got " + std::to_string(d_ff));
  // Llama's rule: int(2 d_ff / 3), then up to a multiple (8 here, 256 there).
  const int64_t f = std::max<int64_t>(2 * d_ff / 3, 1);
  return (f + 7) / 8 * 8;
}

// ============================================================================
// 6. The module
// ============================================================================

SwiGLU::SwiGLU(int64_t D_, int64_t F_, Generator& g) : D(D_), F(F_) {
  if (D <= 0 || F <= 0)
    throw Error("SwiGLU: D and F must be positive, got D " + std::to_string(D) + ", F " +
                std::to_string(F));
  gate = register_module("gate", std::make_shared<Linear>(D, F, false, g));
  up = register_module("up", std::make_shared<Linear>(D, F, false, g));
  down = register_module("down", std::make_shared<Linear>(F, D, false, g));
}

void SwiGLU::report_hidden(const Tensor& x) const {
  const int64_t N = x.numel() / D;
  Tensor a = Tensor::empty({N, F}), u = Tensor::empty({N, F}), h = Tensor::empty({N, F});
  linear_forward(x, gate->weight.data().data(), nullptr, F, a.data());  // a (N,F) = x Wg^T
  linear_forward(x, up->weight.data().data(), nullptr, F, u.data());    // u (N,F) = x Wu^T
  gate_forward(h.data(), a.data(), u.data(), N * F);                    // h = silu(a) * u
  probe()->ffn_hidden(*this, a, h, Activation::SwiGLU);
}

}  // namespace qkv::nn
