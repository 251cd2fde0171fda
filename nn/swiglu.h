// nn::SwiGLU: the gated feed-forward block of Llama (Shazeer, "GLU Variants
// Improve Transformer", 2020), in place of the paper's act(x W1^T) W2^T:
//   y = (silu(x Wg^T) * (x Wu^T)) Wd^T,   silu(a) = a * sigmoid(a),
// x (..., D), Wg and Wu (F, D) (the gate and the up projection), Wd (D, F)
// (the down projection); no biases, as in Llama. Three matrices where the
// feed-forward block has two, so the hidden width F is 2/3 of the width it
// replaces to keep the parameter count (swiglu_hidden). One fused op
// (nn::swiglu) with its own backward; the derivation is in nn/swiglu.cpp and
// docs/swiglu-backward.md.
#pragma once
#include <memory>

#include "nn/ffn.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace qkv::nn {

// The hidden width F that gives SwiGLU about the parameters of a feed-forward
// block of hidden width d_ff: 3 D F = 2 D d_ff at F = 2/3 d_ff (the biases
// aside): as Llama, 2 d_ff / 3 rounded down to an integer, then up to a
// multiple of 8 (one AVX register of floats; Llama rounds up to 256, too
// coarse for small models). d_ff = 4 D gives Llama's 8/3 D: D = 64 -> 176.
int64_t swiglu_hidden(int64_t d_ff);

// x (..., D), w_gate (F, D), w_up (F, D), w_down (D, F) -> (..., D).
// The graph shows it as "swiglu".
Var swiglu(const Var& x, const Var& w_gate, const Var& w_up, const Var& w_down);

// One of the layers' FFN blocks (nn/ffn.h), beside nn::FeedForward.
class SwiGLU : public FFN {
 public:
  // F is the hidden width itself (swiglu_hidden(d_ff) for the Llama rule).
  SwiGLU(int64_t D, int64_t F, Generator& g = default_generator());
  Var forward(const Var& x) const override {
    ModuleScope scope(this);
    if (probe()) report_hidden(x.data());
    return swiglu(x, gate->weight, up->weight, down->weight);
  }
  // Tells the probe (nn/probe.h) the gate's input a = x Wg^T and the hidden
  // units silu(a) * (x Wu^T), remade from x (..., D) for it on a watched step.
  void report_hidden(const Tensor& x) const;
  Var operator()(const Var& x) const { return forward(x); }

  int64_t D, F;
  std::shared_ptr<Linear> gate;  // D -> F, no bias: Wg
  std::shared_ptr<Linear> up;    // D -> F, no bias: Wu
  std::shared_ptr<Linear> down;  // F -> D, no bias: Wd
};

}  // namespace qkv::nn
