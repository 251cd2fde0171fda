// nn::Dropout: inverted dropout. In training each element is zeroed with
// probability p and the survivors are scaled by 1 / (1 - p), so the expected
// value is unchanged and evaluation needs no rescaling; in eval it is the identity.
#pragma once
#include "nn/module.h"

namespace qkv::nn {

// Always drops (the module decides train vs eval). p in [0, 1); p = 0 returns x.
// The mask comes from g, so the same seed gives the same mask.
Var dropout(const Var& x, real p, Generator& g = default_generator());

// A model seeds two generators from its one seed: initialisation with the
// seed itself, dropout with this, so the two streams differ.
inline uint64_t dropout_seed(uint64_t model_seed) { return model_seed ^ kGoldenGamma; }

class Dropout : public Module {
 public:
  // The generator is used at every forward, so it must outlive the module
  // (the default generator does).
  explicit Dropout(real p, Generator& g = default_generator());
  Var forward(const Var& x) const;
  Var operator()(const Var& x) const { return forward(x); }

  real p;

 private:
  Generator* gen_;
};

}  // namespace qkv::nn
