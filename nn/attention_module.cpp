// The attention module (nn/attention.h's MultiHeadAttention): W_Q, W_K, W_V
// and W_O kept back to back so the fused op (nn/attention.cpp) projects an
// input with one sgemm, and its forward setting the op's options from the
// layer's settings (kernel, positions, the relative bias, a probe).
#include <algorithm>
#include <memory>
#include <string>

#include "core/error.h"
#include "nn/attention.h"
#include "nn/probe.h"

namespace qkv::nn {

MultiHeadAttention::MultiHeadAttention(int64_t d_model_, int64_t heads_, bool bias, Generator& g,
                                       int64_t d_k_, int64_t kv_heads_)
    : d_model(d_model_),
      heads(heads_),
      d_k(d_k_ > 0     ? d_k_
          : heads_ > 0 ? d_model_ / heads_
                       : 0),
      d_v(heads_ > 0 ? d_model_ / heads_ : 0),
      kv_heads(kv_heads_ > 0 ? kv_heads_ : heads_) {
  if (heads <= 0 || d_model % heads != 0)
    throw Error("MultiHeadAttention: d_model " + std::to_string(d_model) + " is not divisible by " +
                std::to_string(heads) + " heads");
  if (d_k_ < 0)
    throw Error("MultiHeadAttention: d_k " + std::to_string(d_k_) +
                " is negative (0: d_model / heads)");
  if (kv_heads_ < 0 || kv_heads_ > heads)
    throw Error("MultiHeadAttention: kv_heads " + std::to_string(kv_heads_) +
                " is outside [1, heads " + std::to_string(heads) + "] (0: heads)");
  if (heads % kv_heads != 0)
    throw Error("MultiHeadAttention: kv_heads " + std::to_string(kv_heads_) +
                " does not divide heads " + std::to_string(heads));
  const int64_t D = d_model, E = heads * d_k, Ek = kv_heads * d_k, Dv = kv_heads * d_v;
  w_q = register_module("w_q", std::make_shared<Linear>(D, E, bias, g));   // (E, D)
  w_k = register_module("w_k", std::make_shared<Linear>(D, Ek, bias, g));  // (K*d_k, D)
  w_v = register_module("w_v", std::make_shared<Linear>(D, Dv, bias, g));  // (K*d_v, D)
  w_o = register_module("w_o", std::make_shared<Linear>(D, D, bias, g));   // (D, D)
  // Keep W_Q, W_K, W_V (and their biases) back to back in one buffer, so the
  // fused op computes the three projections of an input with one sgemm and
  // no packing copy. Each parameter stays its own (E, D), (Ek, D) or (Dv, D) view, by name.
  const int64_t rows[4] = {0, E, E + Ek, E + Ek + Dv};  // where each block starts, and the end
  Tensor W = Tensor::empty({E + Ek + Dv, D});
  Linear* parts[3] = {w_q.get(), w_k.get(), w_v.get()};
  for (int i = 0; i < 3; ++i) {
    Tensor view = W.slice0(rows[i], rows[i + 1]);
    view.copy_(parts[i]->weight.data());
    parts[i]->weight.data() = view;
  }
  if (bias) {
    Tensor b = Tensor::empty({E + Ek + Dv});
    for (int i = 0; i < 3; ++i) {
      Tensor view = b.slice0(rows[i], rows[i + 1]);
      view.copy_(parts[i]->bias.data());
      parts[i]->bias.data() = view;
    }
  }
}

AttentionWeights MultiHeadAttention::weights() const {
  return {w_q->weight, w_q->bias, w_k->weight, w_k->bias,
          w_v->weight, w_v->bias, w_o->weight, w_o->bias};
}

Var MultiHeadAttention::forward(const Var& xq, const Var& xkv, const AttentionMask& mask) {
  ModuleScope scope(this);
  AttentionOptions o;
  o.heads = heads;
  o.d_k = d_k;
  o.kv_heads = kv_heads;
  o.rope_base = rope_base;
  o.mask = mask;
  // A probe (nn/probe.h) reads P where the standard kernel makes it anyway.
  // The others never hold P (B,H,T,S): a watched step runs them unchanged
  // (switching kernels would change the step's numbers, and a layer
  // recomputed in backward, unwatched, would no longer match its forward),
  // and the record has no entropy.
  const bool probe_p = probe() && kernel == AttentionKernel::Standard;
  o.kernel = keep_attention_ ? AttentionKernel::Standard : kernel;
  o.memory_budget = memory_budget;
  o.sparse = sparse;
  // A window past the keys sees them all: the same pattern, clamped so that
  // a batch of short sequences trains (the functional op refuses it).
  if (xkv.dim() == 3) o.sparse.window = std::min(sparse.window, xkv.size(1));
  o.scale = scale;
  o.rel_bias = rel_bias;
  o.rel_bidirectional = rel_bidirectional;
  o.rel_max_distance = rel_max_distance;
  o.keep_probs = keep_attention_ || probe_p;
  AttentionResult r = multi_head_attention(xq, xkv, weights(), o);
  if (probe()) probe()->attention(*this, r.probs, r.out.data());
  last_attention_ = keep_attention_ ? r.probs : Tensor();
  return r.out;
}

}  // namespace qkv::nn
