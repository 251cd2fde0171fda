#include "nn/ffn.h"

#include "nn/feedforward.h"
#include "nn/swiglu.h"

namespace qkv::nn {

int64_t ffn_hidden(Activation act, int64_t d_ff) {
  return act == Activation::SwiGLU ? swiglu_hidden(d_ff) : d_ff;
}

std::shared_ptr<FFN> make_ffn(Activation act, int64_t D, int64_t d_ff, bool bias, Generator& g) {
  if (act == Activation::SwiGLU) return std::make_shared<SwiGLU>(D, swiglu_hidden(d_ff), g);
  return std::make_shared<FeedForward>(D, d_ff, act, g, bias);
}

}  // namespace qkv::nn
