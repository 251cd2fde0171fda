// Rotary position embedding, read top to bottom:
//   1. the maths: the rotation, why it encodes relative positions, and its
//      backward (the inverse rotation)
//   2. rope_table         the angles' cos and sin (shared_rope_table: built once, kept)
//   3. rope_rotate        the kernel, forward and backward in one loop
//   4. RopeNode and rope  the autograd adapter and the public op
#include "nn/rope.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>

#include "autograd/node.h"
#include "core/error.h"
#include "core/parallel.h"

namespace qkv::nn {

// ============================================================================
// 1. The maths
// ============================================================================
// A head's vector x (d_k numbers, d_k even) is read as d_k / 2 pairs; pair i
// at position t is a point in the plane, turned by the angle t * theta_i:
//   [y_2i  ]   [cos  -sin] [x_2i  ]
//   [y_2i+1] = [sin   cos] [x_2i+1],   angle t * theta_i, theta_i = base^(-2i/d_k)
// Call that 2x2 matrix R(t theta_i), and R_t the block-diagonal (d_k, d_k)
// matrix of all d_k / 2 of them: y = R_t x.
// Relative positions: rotations compose by adding angles and R^T = R^-1, so
// for a query q at t and a key k at s,
//   (R_t q) . (R_s k) = q^T R_t^T R_s k = q^T R_(s-t) k:
// the score sees only the offset s - t, and the same weights serve every t.
// Backward: y = R_t x is linear in x with matrix R_t, so by the matrix rule
//   dx = R_t^T dy = R_(-t) dy     (a rotation back by the same angles):
//   dx_2i   =  dy_2i cos + dy_2i+1 sin
//   dx_2i+1 = -dy_2i sin + dy_2i+1 cos
// No input is saved: backward needs only the angles (the positions).

// ============================================================================
// 2. The angles
// ============================================================================

RopeTable rope_table(int64_t T, int64_t d_k, real base, int64_t pos0) {
  if (T < 0 || pos0 < 0 || d_k <= 0 || d_k % 2 != 0 || !(base > 1))
    throw Error("rope_table: T " + std::to_string(T) + ", d_k " + std::to_string(d_k) + ", base " +
                std::to_string(base) + ", pos0 " + std::to_string(pos0) +
                ": needs T >= 0, an even d_k > 0, base > 1 and pos0 >= 0");
  RopeTable tab;
  tab.T = T;
  tab.half = d_k / 2;
  tab.pos0 = pos0;
  tab.cos.resize(static_cast<size_t>(T * tab.half));
  tab.sin.resize(tab.cos.size());
  for (int64_t i = 0; i < tab.half; ++i) {
    // theta_i = base^(-2i / d_k), in double: angles reach T * theta_0 = T
    // radians, and float's 24 bits would lose the low digits of t * theta.
    const double theta = std::pow(static_cast<double>(base), -2.0 * i / static_cast<double>(d_k));
    for (int64_t t = 0; t < T; ++t) {
      const double angle = static_cast<double>(pos0 + t) * theta;
      tab.cos[t * tab.half + i] = static_cast<real>(std::cos(angle));
      tab.sin[t * tab.half + i] = static_cast<real>(std::sin(angle));
    }
  }
  return tab;
}

std::shared_ptr<const RopeTable> shared_rope_table(int64_t T, int64_t d_k, real base,
                                                   int64_t pos0) {
  struct Entry {
    int64_t T, d_k, pos0;
    real base;
    std::shared_ptr<const RopeTable> table;
  };
  static std::mutex mutex;
  static std::vector<Entry> kept;  // most recently asked last
  std::lock_guard<std::mutex> lock(mutex);
  for (size_t i = 0; i < kept.size(); ++i)
    if (kept[i].T == T && kept[i].d_k == d_k && kept[i].pos0 == pos0 && kept[i].base == base) {
      std::rotate(kept.begin() + i, kept.begin() + i + 1, kept.end());
      return kept.back().table;
    }
  auto table = std::make_shared<const RopeTable>(rope_table(T, d_k, base, pos0));
  if (kept.size() == 16) kept.erase(kept.begin());
  kept.push_back({T, d_k, pos0, base, table});
  return table;
}

// ============================================================================
// 3. The kernel
// ============================================================================

void rope_rotate(real* x, int64_t rows, int64_t H, int64_t d_k, int64_t ld, const RopeTable& tab,
                 bool inverse) {
  const int64_t half = d_k / 2;
  const real sign = inverse ? real(-1) : real(1);  // R(-a): sin flips, cos stays
  parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t t = r % tab.T;
          const real* __restrict c = tab.cos.data() + t * half;  // (d_k / 2)
          const real* __restrict s = tab.sin.data() + t * half;  // (d_k / 2)
          for (int64_t h = 0; h < H; ++h) {
            real* __restrict p = x + r * ld + h * d_k;  // one head (d_k)
#pragma omp simd
            for (int64_t i = 0; i < half; ++i) {
              const real x0 = p[2 * i], x1 = p[2 * i + 1], si = sign * s[i];
              p[2 * i] = x0 * c[i] - x1 * si;      // y_2i   = x_2i cos - x_2i+1 sin
              p[2 * i + 1] = x0 * si + x1 * c[i];  // y_2i+1 = x_2i sin + x_2i+1 cos
            }
          }
        }
      },
      grain_for(H * d_k * 3));
}

// ============================================================================
// 4. The autograd adapter and the public op
// ============================================================================

namespace {
// Saves the angles only: the rotation is linear, so backward never reads x.
struct RopeNode : Node {
  RopeTable table;
  int64_t heads = 0, d_k = 0;
  const char* name() const override { return "rope"; }
  OpDoc doc() const override {
    return {"y = R_t x  (each pair (x_2i, x_2i+1) turned by t theta_i, theta_i = base^(-2i/d_k))",
            "dx = R_t^T dy = R_(-t) dy  (the same pairs turned back)",
            "docs/rope-backward.md#backward-step-by-step"};
  }
  TensorList backward(const Tensor& dy) override {
    Tensor dx = dy.clone();  // (B, T, H*d_k)
    rope_rotate(dx.data(), dx.numel() / (heads * d_k), heads, d_k, heads * d_k, table, true);
    return {dx};
  }
};
}  // namespace

Var rope(const Var& x, int64_t heads, real base, int64_t pos0) {
  const Tensor& X = x.data();  // (B, T, H*d_k)
  if (X.dim() != 3 || heads <= 0 || X.size(2) % heads != 0 || (X.size(2) / heads) % 2 != 0)
    throw Error("rope: input " + to_string(X.shape()) + " with " + std::to_string(heads) +
                " heads: expected (B, T, H*d_k) with an even head size d_k");
  const int64_t T = X.size(1), d_k = X.size(2) / heads;
  auto node = make_node<RopeNode>();
  node->table = rope_table(T, d_k, base, pos0);
  node->heads = heads;
  node->d_k = d_k;
  Tensor Y = X.clone();
  if (T > 0)
    rope_rotate(Y.data(), X.numel() / X.size(2), heads, d_k, X.size(2), node->table, false);
  return make_result(Y, node, {x});
}

}  // namespace qkv::nn
