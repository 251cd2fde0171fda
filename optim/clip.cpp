#include "optim/clip.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "core/pool.h"

namespace qkv::optim {

namespace {

// Sum of squares, in double. Fixed chunks, summed in order, so the result does
// not depend on the number of threads.
double sum_of_squares(const real* x, int64_t n) {
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  auto chunk_sum = [x, n](int64_t c) {
    double s = 0;
    const int64_t e = std::min(n, (c + 1) * kChunk);
    for (int64_t j = c * kChunk; j < e; ++j) s += double(x[j]) * double(x[j]);
    return s;
  };
  if (chunks == 1) return chunk_sum(0);
  PoolVector<double> partial(chunks);  // pooled: clipping runs every step
  parallel_for(
      chunks,
      [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) partial[c] = chunk_sum(c);
      },
      kParallelGrain / kChunk);
  double s = 0;
  for (double p : partial) s += p;
  return s;
}

}  // namespace

real clip_grad_norm(const std::vector<Var>& params, real max_norm) {
  if (!std::isfinite(max_norm) || max_norm <= 0)
    throw Error("clip_grad_norm: max_norm must be finite and > 0, got " + std::to_string(max_norm));
  double sq = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined())
      throw Error("clip_grad_norm: parameter " + std::to_string(i) + " is an undefined Var");
    const Tensor& g = params[i].grad();
    if (g.defined()) sq += sum_of_squares(g.data(), g.numel());
  }
  const double norm = std::sqrt(sq);
  if (std::isfinite(norm) && norm > double(max_norm)) {
    const real scale = static_cast<real>(double(max_norm) / (norm + 1e-6));
    for (const Var& p : params) {
      Tensor g = p.grad();  // a handle: scaling it scales the Var's gradient
      if (!g.defined()) continue;
      real* __restrict d = g.data();
      parallel_for(g.numel(), [=](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) d[j] *= scale;
      });
    }
  }
  return static_cast<real>(norm);
}

}  // namespace qkv::optim
