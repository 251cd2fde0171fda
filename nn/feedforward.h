// nn::FeedForward: the Transformer's position-wise feed-forward block,
//   y = act(x W1^T + b1) W2^T + b2,
// x (..., D), W1 (F, D), W2 (D, F), with F the hidden width (the paper's
// d_ff, usually 4 D); act is ReLU or GELU. The parameters live in two Linear
// children (linear1, linear2) so their names match PyTorch's; the computation
// is one fused op (nn::feed_forward) with its own backward. Without biases
// (bias = false, --no-bias): y = act(x W1^T) W2^T. One of the layers' FFN
// blocks (nn/ffn.h), beside nn::SwiGLU.
#pragma once
#include <memory>

#include "nn/activation.h"
#include "nn/ffn.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace qkv::nn {

// x (..., D), w1 (F, D), b1 (F), w2 (D, F), b2 (D) -> (..., D); b1 and b2
// may both be undefined (no biases). act: ReLU or GELU.
Var feed_forward(const Var& x, const Var& w1, const Var& b1, const Var& w2, const Var& b2,
                 Activation act = Activation::ReLU);

class FeedForward : public FFN {
 public:
  FeedForward(int64_t D, int64_t F, Activation act = Activation::ReLU,
              Generator& g = default_generator(), bool bias = true);
  Var forward(const Var& x) const override {
    ModuleScope scope(this);
    if (probe()) report_hidden(x.data());
    return feed_forward(x, linear1->weight, linear1->bias, linear2->weight, linear2->bias, act);
  }
  // Tells the probe (nn/probe.h) pre = x W1^T + b1 and act(pre), remade from
  // x (..., D) for it: one extra (N, D) x (D, F) product on a watched step.
  void report_hidden(const Tensor& x) const;
  Var operator()(const Var& x) const { return forward(x); }

  int64_t D, F;
  Activation act;
  std::shared_ptr<Linear> linear1;  // D -> F (its bias undefined without biases)
  std::shared_ptr<Linear> linear2;  // F -> D
};

}  // namespace qkv::nn
