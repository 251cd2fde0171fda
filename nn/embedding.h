// nn::Embedding: a lookup table of V rows of size D. Token ids pick rows:
//   out[b, t, :] = scale * weight[ids[b, t], :]
// The fused op (nn::embedding) scatter-adds the upstream rows back into the
// weight's gradient; the ids themselves are integers and get no gradient.
#pragma once
#include <cstdint>
#include <vector>

#include "nn/module.h"

namespace qkv::nn {

// weight (V, D), ids laid out row-major in `shape` (e.g. (B, T)) -> shape + (D).
// scale multiplies the rows (the paper's sqrt(D) on the embeddings).
Var embedding(const Var& weight, const std::vector<int64_t>& ids, const Shape& shape,
              real scale = 1);

class Embedding : public Module {
 public:
  Embedding(int64_t V, int64_t D, Generator& g = default_generator());
  Var forward(const std::vector<int64_t>& ids, const Shape& shape, real scale = 1) const {
    ModuleScope scope(this);
    return embedding(weight, ids, shape, scale);
  }
  Var operator()(const std::vector<int64_t>& ids, const Shape& shape, real scale = 1) const {
    return forward(ids, shape, scale);
  }

  int64_t V, D;
  Parameter weight;  // (V, D), N(0, 1) as torch.nn.Embedding
};

}  // namespace qkv::nn
