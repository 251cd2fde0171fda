// nn::Linear: y = x W^T + b, with W stored (out, in) as in PyTorch.
// One fused op (nn::linear) computes it with a single sgemm over all leading
// dimensions and writes its own backward.
#pragma once
#include "nn/module.h"

namespace qkv::nn {

// x (..., in), weight (out, in), bias (out) or undefined -> (..., out).
Var linear(const Var& x, const Var& weight, const Var& bias = Var());

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true,
         Generator& g = default_generator());
  Var forward(const Var& x) const { return linear(x, weight, bias); }
  Var operator()(const Var& x) const { return forward(x); }

  int64_t in_features, out_features;
  Parameter weight;  // (out, in), Xavier-uniform
  Parameter bias;    // (out), zeros; undefined when bias = false
};

}  // namespace qkv::nn
