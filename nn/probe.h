// nn::Probe: what a layer reports while the training instruments watch it
// (trainer/instruments.h fills one; docs/instruments.md). A module holds a
// Probe* that is null unless Module::set_probe gave it one: with none set,
// a layer's forward pays one null test. The probe sees the numbers a layer
// computes anyway (attention's P) or remakes them once for itself (a
// feed-forward block's hidden units); it changes nothing the layer returns.
#pragma once
#include "core/tensor.h"
#include "nn/activation.h"

namespace qkv::nn {

class Module;

class Probe {
 public:
  virtual ~Probe() = default;
  // A feed-forward block's hidden units for N = B*T tokens: `pre` (N, F) what
  // enters the nonlinearity (x W1^T + b1; SwiGLU's gate x Wg^T) and `post`
  // (N, F) what leaves it (act(pre); SwiGLU's silu(x Wg^T) * (x Wu^T)).
  virtual void ffn_hidden(const Module& m, const Tensor& pre, const Tensor& post,
                          Activation act) = 0;
  // An attention layer's probabilities `probs` (B, H, T, S) (undefined for
  // the sparse and linear kernels, which never form P) and output (B, T, D).
  virtual void attention(const Module& m, const Tensor& probs, const Tensor& out) = 0;
};

}  // namespace qkv::nn
