// nn::Norm: what a residual sublayer (nn/sublayer.h) and a model's final norm
// need of a normalisation layer, so that the layers hold a Norm and never
// name LayerNorm. A norm reads the last dimension D of its input, scales by a
// learned gain (weight) and may shift by a learned bias; it also offers
// Post-LN's residual sum fused into its pass, add_norm(x, fx) = norm(x + fx).
//
//   nn/layernorm.h   "layer"  LayerNorm: zero mean, unit variance, gain and bias
//   nn/rmsnorm.h     "rms"    RMSNorm: unit root mean square, gain, no bias
//
// Chosen by name through one table (norm_kinds() below). Adding a norm: its
// file nn/<name>.{h,cpp}, a class deriving from Norm with its fused kernels,
// and its row in nn/norm.cpp.
//
//   std::shared_ptr<nn::Norm> n = nn::make_norm("layer", 512);
//   Var y = n->forward(x);        // (..., D) -> (..., D)
//   Var z = n->add_norm(x, fx);   // norm(x + fx), the sum made in the same pass
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/registry.h"
#include "nn/module.h"

namespace qkv::nn {

class Norm : public Module {
 public:
  Norm(int64_t D_, real eps_) : D(D_), eps(eps_) {}
  // x (..., D) -> (..., D).
  virtual Var forward(const Var& x) const = 0;
  // norm(x + fx) in one op: Post-LN's norm(x + f(x)), x the skip path and fx
  // the sublayer's output, both (..., D).
  virtual Var add_norm(const Var& x, const Var& fx) const = 0;
  Var operator()(const Var& x) const { return forward(x); }

  int64_t D;
  real eps;
  Parameter weight;  // the gain (D)
  Parameter bias;    // the shift (D); undefined for a norm without one
};

struct NormKind {
  const char* name;         // "layer", as a model's settings name it
  const char* help;         // one line: what it computes
  int numbers_per_feature;  // parameters per feature of D: 2 (gain, shift) or 1 (gain)
  std::shared_ptr<Norm> (*make)(int64_t D);
};

// Every norm, in the order help lists them.
const Registry<NormKind>& norm_kinds();

// The row named `name`, or nullptr.
const NormKind* find_norm(const std::string& name);

// A norm of kind `name` over D features; throws "norm: expected layer, got
// '<name>'" for a name not in the table.
std::shared_ptr<Norm> make_norm(const std::string& name, int64_t D);

}  // namespace qkv::nn
