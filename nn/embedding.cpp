#include "nn/embedding.h"

#include <algorithm>
#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/pool.h"
#include "nn/init.h"

namespace qkv::nn {

// Saved: the ids (n = number of positions) and the weight's shape; not the weight.
struct EmbeddingNode : Node {
  PoolVector<int64_t> ids;  // pooled: a copy is made every step
  Shape weight_shape;
  real scale = 1;
  const char* name() const override { return "embedding"; }
  OpDoc doc() const override {
    return {"out[i] = scale * W[ids[i]]", "dW[v] = scale * sum over {i : ids[i] = v} of dout[i]",
            "docs/forward-pass.md#1-token-ids-become-vectors-embedding"};
  }

  // out[i] = scale * W[ids[i]]  =>  dW[v] = scale * sum_{i : ids[i] = v} dout[i]
  // (rows never looked up get 0; a repeated id accumulates).
  TensorList backward(const Tensor& g) override {
    const int64_t D = weight_shape[1], n = static_cast<int64_t>(ids.size());
    Tensor dw = Tensor::zeros(weight_shape);
    real* __restrict dp = dw.data();
    const real* __restrict gp = g.data();
    // Serial over positions: two positions with the same id add into the same row.
    for (int64_t i = 0; i < n; ++i) {
      real* __restrict dr = dp + ids[i] * D;
      const real* __restrict gr = gp + i * D;
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) dr[j] += scale * gr[j];
    }
    return {dw};
  }
  void release_saved() override { ids = PoolVector<int64_t>(); }
};

Var embedding(const Var& weight, const std::vector<int64_t>& ids, const Shape& shape, real scale) {
  const Tensor& W = weight.data();
  if (W.dim() != 2) throw Error("embedding: weight " + to_string(W.shape()) + " must be (V, D)");
  check_shape(shape, "embedding");
  const int64_t V = W.size(0), D = W.size(1), n = numel(shape);
  if (static_cast<int64_t>(ids.size()) != n)
    throw Error("embedding: " + std::to_string(ids.size()) + " ids do not fill shape " +
                to_string(shape) + " (" + std::to_string(n) + " positions)");
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= V)
      throw Error("embedding: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                  " is out of range [0, V) with V = " + std::to_string(V) + " (weight " +
                  to_string(W.shape()) + ")");

  if (static_cast<int64_t>(shape.size()) >= kMaxRank)
    throw Error("embedding: output " + to_string(shape) + " + (" + std::to_string(D) +
                ") exceeds rank " + std::to_string(kMaxRank));
  Shape os = shape;
  os.push_back(D);  // shape + (D), e.g. (B, T, D)
  Tensor out = Tensor::empty(os);
  const real* __restrict wp = W.data();
  real* __restrict op = out.data();
  parallel_for(
      n,
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const real* __restrict wr = wp + ids[i] * D;
          real* __restrict orow = op + i * D;
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) orow[j] = scale * wr[j];
        }
      },
      grain_for(D));

  auto node = make_node<EmbeddingNode>();
  node->weight_shape = W.shape();
  node->scale = scale;
  if (should_record({weight}))
    node->ids.assign(ids.begin(), ids.end());  // only when backward needs them
  return make_result(out, node, {weight});
}

Embedding::Embedding(int64_t V_, int64_t D_, Generator& g) : V(V_), D(D_) {
  if (V <= 0 || D <= 0)
    throw Error("Embedding: V and D must be positive, got V " + std::to_string(V) + ", D " +
                std::to_string(D));
  weight = register_parameter("weight", normal_init({V, D}, 1, g));
}

}  // namespace qkv::nn
