// The patch projection: the maths (nn/patch_embed.h), the gather and scatter
// kernels, the node with its backward, the op, the layer; in that order.
// docs/vit-backward.md derives the backward.
#include "nn/patch_embed.h"

#include <cstring>
#include <memory>
#include <string>

#include "autograd/node.h"
#include "core/error.h"
#include "core/parallel.h"
#include "nn/init.h"

namespace qkv::nn {

// ---- kernels ---------------------------------------------------------------------------
// Patch n = gy * (W/P) + gx of image b is row b*N + n of `patches`; its column
// (c*P + py)*P + px holds pixel x[b, c, gy*P + py, gx*P + px]. Each (b, gy)
// copies P runs of P contiguous pixels per channel and patch.
void patch_gather(const real* x, int64_t B, int64_t C, int64_t H, int64_t W, int64_t P,
                  real* patches) {
  const int64_t Hp = H / P, Wp = W / P, N = Hp * Wp, K = C * P * P;
  parallel_for(
      B * Hp,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t b = r / Hp, gy = r % Hp;
          for (int64_t gx = 0; gx < Wp; ++gx) {
            real* row = patches + (b * N + gy * Wp + gx) * K;  // (C*P*P)
            for (int64_t c = 0; c < C; ++c)
              for (int64_t py = 0; py < P; ++py)
                std::memcpy(row + (c * P + py) * P,
                            x + ((b * C + c) * H + gy * P + py) * W + gx * P, P * sizeof(real));
          }
        }
      },
      grain_for(Wp * K));
}

// The inverse of patch_gather: every pixel belongs to exactly one patch, so
// dx is dpatches put back in place (a copy, nothing summed).
void patch_scatter(const real* dpatches, int64_t B, int64_t C, int64_t H, int64_t W, int64_t P,
                   real* dx) {
  const int64_t Hp = H / P, Wp = W / P, N = Hp * Wp, K = C * P * P;
  parallel_for(
      B * Hp,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t b = r / Hp, gy = r % Hp;
          for (int64_t gx = 0; gx < Wp; ++gx) {
            const real* row = dpatches + (b * N + gy * Wp + gx) * K;
            for (int64_t c = 0; c < C; ++c)
              for (int64_t py = 0; py < P; ++py)
                std::memcpy(dx + ((b * C + c) * H + gy * P + py) * W + gx * P,
                            row + (c * P + py) * P, P * sizeof(real));
          }
        }
      },
      grain_for(Wp * K));
}

// ---- node --------------------------------------------------------------------------------
// Saved: the gathered patches (for dE) and E (for dpatches); the images'
// shape for the scatter. Nothing else.
struct PatchEmbedNode : Node {
  Tensor patches, w;  // (B*N, C*P*P), (D, C*P*P)
  Shape image_shape;  // (B, C, H, W)
  int64_t P = 1;
  bool has_bias = false;
  const char* name() const override { return "patch_embed"; }
  OpDoc doc() const override {
    return {"Y = im2col(X) E^T + b   (B*N, C*P*P) x (C*P*P, D) -> (B, N, D)",
            "dE = dY^T im2col(X),  db = colsum(dY),  dX = col2im(dY E)",
            "docs/vit-backward.md#the-patch-projection-patch_embed"};
  }
  // Y = patches E^T + b  =>  dE = dY^T patches;  db = sum_rows dY;  dpatches = dY E, and
  // dX = col2im(dpatches) (the gather's inverse: each pixel sits in one patch)
  TensorList backward(const Tensor& g) override {
    const int64_t D = w.size(0);
    Tensor dx, dw, db, dpatches;
    if (needs_grad(0)) dpatches = Tensor::empty(patches.shape());
    if (needs_grad(1)) dw = Tensor::empty(w.shape());
    if (has_bias && needs_grad(2)) db = Tensor::empty({D});
    linear_backward(g.data(), patches, w.data(), D, dpatches.defined() ? dpatches.data() : nullptr,
                    dw.defined() ? dw.data() : nullptr, db.defined() ? db.data() : nullptr);
    if (dpatches.defined()) {
      dx = Tensor::empty(image_shape);
      const Shape& s = image_shape;
      patch_scatter(dpatches.data(), s[0], s[1], s[2], s[3], P, dx.data());
    }
    if (has_bias) return {dx, dw, db};
    return {dx, dw};
  }
  void release_saved() override { patches = w = Tensor(); }
};

// ---- op ------------------------------------------------------------------------------------
Var patch_embed(const Var& images, const Var& weight, const Var& bias, int64_t P) {
  const Tensor& X = images.data();
  const Tensor& E = weight.data();
  const std::string shapes = "images " + to_string(X.shape()) + ", weight " + to_string(E.shape());
  if (X.dim() != 4) throw Error("patch_embed: " + shapes + ": images must be (B, C, H, W)");
  if (P < 1) throw Error("patch_embed: patch size P = " + std::to_string(P) + ": must be >= 1");
  const int64_t B = X.size(0), C = X.size(1), H = X.size(2), W = X.size(3);
  if (H % P != 0 || W % P != 0)
    throw Error("patch_embed: " + shapes + ", patch " + std::to_string(P) + ": H " +
                std::to_string(H) + " and W " + std::to_string(W) + " must be multiples of P");
  const int64_t K = C * P * P, N = (H / P) * (W / P);
  if (E.dim() != 2 || E.size(1) != K)
    throw Error("patch_embed: " + shapes + ", patch " + std::to_string(P) +
                ": patches hold C*P*P = " + std::to_string(K) +
                " numbers, so the weight must be (D, " + std::to_string(K) + ")");
  const int64_t D = E.size(0);
  const bool has_bias = bias.defined();
  if (has_bias && bias.shape() != Shape{D})
    throw Error("patch_embed: bias " + to_string(bias.shape()) + " does not match " + shapes +
                " (expected (" + std::to_string(D) + "))");
  Tensor patches = Tensor::empty({B * N, K});  // (B*N, C*P*P)
  patch_gather(X.data(), B, C, H, W, P, patches.data());
  Tensor Y = Tensor::empty({B, N, D});
  // (B*N, C*P*P) x (C*P*P, D) -> (B*N, D), E read transposed by sgemm
  linear_forward(patches, E.data(), has_bias ? bias.data().data() : nullptr, D, Y.data());
  auto node = make_node<PatchEmbedNode>();
  node->patches = patches;
  node->w = E;
  node->image_shape = X.shape();
  node->P = P;
  node->has_bias = has_bias;
  if (has_bias) return make_result(Y, node, {images, weight, bias});
  return make_result(Y, node, {images, weight});
}

// ---- layer -----------------------------------------------------------------------------------
PatchEmbedding::PatchEmbedding(int64_t C, int64_t P, int64_t D, bool with_bias, Generator& g)
    : Linear(C > 0 && P > 0 ? C * P * P : 1, D, with_bias, g), channels(C), patch(P) {
  if (C < 1 || P < 1)
    throw Error("PatchEmbedding: channels and patch must be positive, got " + std::to_string(C) +
                " and " + std::to_string(P));
}

}  // namespace qkv::nn
