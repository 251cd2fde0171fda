// Parameter initialisation, as the paper and PyTorch do it, from a Generator.
#pragma once
#include "core/tensor.h"

namespace qkv::nn {

// U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)), for a (fan_out, fan_in) weight.
Tensor xavier_uniform(const Shape& shape, Generator& g = default_generator(), real gain = 1);
// N(0, std^2).
Tensor normal_init(const Shape& shape, real stddev, Generator& g = default_generator());

}  // namespace qkv::nn
