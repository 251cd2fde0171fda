// nn::FFN: what a layer (models/encoder_decoder.h) needs of its position-wise
// feed-forward sublayer, the layers' `ffn`, so that a layer holds an FFN and
// never names the block it is:
//
//   nn/feedforward.h  relu, gelu  FeedForward: act(x W1^T + b1) W2^T + b2 (the paper's)
//   nn/swiglu.h       swiglu      SwiGLU: (silu(x Wg^T) * (x Wu^T)) Wd^T (Llama's, no biases)
//
// make_ffn picks the block from the activation's name (nn/activation.h's
// table), with the hidden width that keeps the parameter count: SwiGLU has
// three matrices where FeedForward has two, so it gets swiglu_hidden(d_ff),
// about 2/3 of d_ff (rounded up to a multiple of 8).
//
//   std::shared_ptr<nn::FFN> f = nn::make_ffn(Activation::SwiGLU, 64, 256);
//   Var y = f->forward(x);   // (..., D) -> (..., D)
#pragma once
#include <memory>

#include "core/generator.h"
#include "nn/activation.h"
#include "nn/module.h"

namespace qkv::nn {

struct MoERouting;  // nn/moe.h

class FFN : public Module {
 public:
  // x (..., D) -> (..., D). No dropout and no randomness inside: the same x
  // gives the same y, so Recompute::FFN may run it again in backward.
  virtual Var forward(const Var& x) const = 0;
  Var operator()(const Var& x) const { return forward(x); }
  // A mixture of experts (nn/moe.h) keeps the load-balancing loss and the
  // routing of its last forward; a dense block has neither (undefined, null).
  virtual Var aux_loss() const { return Var(); }
  virtual const MoERouting* routing() const { return nullptr; }
  // Parameters one token uses (all of a dense block's).
  virtual int64_t active_parameters() const { return num_parameters(); }
};

// The feed-forward sublayer of width D for `act`: FeedForward (D, d_ff, act)
// for relu and gelu, with or without its two biases; SwiGLU (D,
// swiglu_hidden(d_ff)) for swiglu, which has no biases whatever `bias` says
// (Llama's block).
std::shared_ptr<FFN> make_ffn(Activation act, int64_t D, int64_t d_ff, bool bias = true,
                              Generator& g = default_generator());

// The hidden width make_ffn gives the block: d_ff, or swiglu_hidden(d_ff).
int64_t ffn_hidden(Activation act, int64_t d_ff);

}  // namespace qkv::nn
