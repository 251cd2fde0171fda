#include "nn/positional.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/error.h"
#include "core/parallel.h"
#include "nn/init.h"

namespace qkv::nn {

// Saved: only shapes. Adding is linear, so backward never reads x or the table.
struct AddPositionsNode : Node {
  Shape table_shape;
  int64_t T = 0;
  const char* name() const override { return "add_positions"; }
  OpDoc doc() const override {
    return {"y[b,t] = x[b,t] + P[t]", "dx = dy,  dP[t] = sum_b dy[b,t]",
            "docs/forward-pass.md#2-positions-are-added-add_positions"};
  }

  // y[b, t] = x[b, t] + P[t]  =>  dx = dy;  dP[t] = sum_b dy[b, t] (t < T), dP[t >= T] = 0
  TensorList backward(const Tensor& g) override {
    Tensor dx, dp;
    if (needs_grad(0)) dx = g;  // the identity: share the upstream buffer
    if (needs_grad(1)) {
      const int64_t D = table_shape[1], TD = T * D, Bn = TD > 0 ? g.numel() / TD : 0;
      dp = Tensor::zeros(table_shape);
      real* __restrict d = dp.data();
      const real* __restrict gp = g.data();
      for (int64_t b = 0; b < Bn; ++b) {
        const real* __restrict gb = gp + b * TD;
#pragma omp simd
        for (int64_t k = 0; k < TD; ++k) d[k] += gb[k];
      }
    }
    return {dx, dp};
  }
};

Var add_positions(const Var& x, const Var& table) {
  const Tensor& X = x.data();
  const Tensor& P = table.data();
  if (X.dim() < 2 || P.dim() != 2 || X.size(-1) != P.size(1) || X.size(-2) > P.size(0))
    throw Error("add_positions: input " + to_string(X.shape()) + " + table " +
                to_string(P.shape()) +
                ": expected input (..., T, D) and a table (L, D) with L >= T");
  const int64_t T = X.size(-2), D = X.size(-1), TD = T * D;
  const int64_t Bn = TD > 0 ? X.numel() / TD : 0;  // product of the leading dims
  Tensor Y = Tensor::empty(X.shape());
  const real* __restrict xp = X.data();
  const real* __restrict pp = P.data();  // rows [0, T) are the first T * D values
  real* __restrict yp = Y.data();
  parallel_for(
      Bn,
      [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const real* __restrict xb = xp + b * TD;
          real* __restrict yb = yp + b * TD;
#pragma omp simd
          for (int64_t k = 0; k < TD; ++k) yb[k] = xb[k] + pp[k];
        }
      },
      grain_for(TD));
  auto node = make_node<AddPositionsNode>();
  node->table_shape = P.shape();
  node->T = T;
  return make_result(Y, node, {x, table});
}

// ---- sinusoidal ----------------------------------------------------------------

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(int64_t D_, int64_t max_positions)
    : D(D_) {
  if (D <= 0 || max_positions < 0)
    throw Error("SinusoidalPositionalEncoding: need D > 0 and max_positions >= 0, got D " +
                std::to_string(D) + ", max_positions " + std::to_string(max_positions));
  grow(std::min(max_positions, kEagerRows));
}

void SinusoidalPositionalEncoding::grow(int64_t rows) const {
  Tensor t = Tensor::empty({rows, D});
  real* p = t.data();
  for (int64_t j = 0; j < D; ++j) {
    // Column j = 2i (sin) or 2i + 1 (cos) shares the frequency 1 / 10000^(2i / D).
    const double two_i = static_cast<double>(j - (j % 2));
    const double inv_freq = std::pow(10000.0, -two_i / static_cast<double>(D));
    for (int64_t pos = 0; pos < rows; ++pos) {
      const double angle = static_cast<double>(pos) * inv_freq;
      p[pos * D + j] = static_cast<real>(j % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  }
  table_ = t;
}

Tensor SinusoidalPositionalEncoding::table(int64_t T) const {
  if (T < 0) throw Error("SinusoidalPositionalEncoding: negative length " + std::to_string(T));
  if (T > table_.size(0)) grow(std::max(T, 2 * table_.size(0)));
  return table_.slice0(0, T);
}

Var SinusoidalPositionalEncoding::forward(const Var& x) const {
  ModuleScope scope(this);
  if (x.dim() < 2 || x.size(-1) != D)
    throw Error("SinusoidalPositionalEncoding: input " + to_string(x.shape()) +
                " must be (B, T, D) with D = " + std::to_string(D));
  // A constant: Var without requires_grad, so only x gets a gradient.
  return add_positions(x, Var(table(x.size(-2))));
}

// ---- learned ---------------------------------------------------------------------

LearnedPositionalEmbedding::LearnedPositionalEmbedding(int64_t max_positions_, int64_t D_,
                                                       Generator& g)
    : max_positions(max_positions_), D(D_) {
  if (max_positions <= 0 || D <= 0)
    throw Error(
        "LearnedPositionalEmbedding: max_positions and D must be positive, got max_positions " +
        std::to_string(max_positions) + ", D " + std::to_string(D));
  weight = register_parameter("weight", normal_init({max_positions, D}, 1, g));
}

Var LearnedPositionalEmbedding::forward(const Var& x) const {
  ModuleScope scope(this);
  if (x.dim() < 2 || x.size(-1) != D)
    throw Error("LearnedPositionalEmbedding: input " + to_string(x.shape()) +
                " must be (B, T, D) with D = " + std::to_string(D));
  const int64_t T = x.size(-2);
  if (T > max_positions)
    throw Error("LearnedPositionalEmbedding: sequence length T = " + std::to_string(T) +
                " exceeds max_positions = " + std::to_string(max_positions));
  return add_positions(x, weight);
}

}  // namespace qkv::nn
