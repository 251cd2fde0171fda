// nn::Linear: y = x W^T + b, with W stored (out, in) as in PyTorch.
// One fused op (nn::linear) computes it with a single sgemm over all leading
// dimensions and writes its own backward.
#pragma once
#include "nn/module.h"

namespace qkv::nn {

// x (..., in), weight (out, in), bias (out) or undefined -> (..., out).
Var linear(const Var& x, const Var& weight, const Var& bias = Var());

// The kernels behind linear(), shared with other fused ops that apply linear
// maps (the attention projections). X is (N, in) with N = its leading dims;
// W points at an (out, in) row-major block, b at (out) or is null.
//   forward:  Y (N, out) = X W^T + b
//   backward: dX = dY W;  dW = dY^T X;  db = column sums of dY
// Each backward output may be null (not wanted).
void linear_forward(const Tensor& X, const real* W, const real* b, int64_t out, real* Y);
void linear_backward(const real* dY, const Tensor& X, const real* W, int64_t out, real* dX,
                     real* dW, real* db);

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true,
         Generator& g = default_generator());
  Var forward(const Var& x) const {
    ModuleScope scope(this);
    return linear(x, weight, bias);
  }
  Var operator()(const Var& x) const { return forward(x); }

  int64_t in_features, out_features;
  Parameter weight;  // (out, in), Xavier-uniform
  Parameter bias;    // (out), zeros; undefined when bias = false
};

// The usual weight decay mask for m.parameters() (optim::Optimizer::
// set_weight_decay_mask): true for the weight matrices of Linear layers,
// false for biases, LayerNorm gains and shifts, embeddings and position
// tables (a Linear weight tied to an embedding is the embedding's).
std::vector<bool> weight_decay_mask(const Module& m);

}  // namespace qkv::nn
