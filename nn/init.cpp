#include "nn/init.h"

#include <cmath>

#include "core/error.h"

namespace qkv::nn {

Tensor xavier_uniform(const Shape& shape, Generator& g, real gain) {
  if (shape.size() < 2)
    throw Error("xavier_uniform: needs a weight of rank >= 2, got " + to_string(shape));
  // fan_out = shape[0]; fan_in = shape[1] * receptive field (1 for Linear).
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  const double fan_in = static_cast<double>(shape[1] * receptive);
  const double fan_out = static_cast<double>(shape[0] * receptive);
  const real a = static_cast<real>(gain * std::sqrt(6.0 / (fan_in + fan_out)));
  return Tensor::uniform(shape, -a, a, g);
}

Tensor normal_init(const Shape& shape, real stddev, Generator& g) {
  return Tensor::normal(shape, 0, stddev, g);
}

}  // namespace qkv::nn
