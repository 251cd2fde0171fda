// The Vision Transformer's patch projection (Dosovitskiy et al. 2021, eq. 1):
// an image (C, H, W) cut into N = (H/P)(W/P) patches of P x P pixels, each
// flattened and mapped to D numbers by one linear map E (D, C*P*P):
//
//   patches (B*N, C*P*P) = im2col(images)          row n = (gy, gx) row-major over
//                                                   the grid, columns (c, py, px)
//   Y (B, N, D)          = patches E^T + b         one sgemm (nn::linear's kernel)
//
// which is a convolution with kernel = stride = P (E reshaped to (D, C, P, P)).
// One fused op, nn::patch_embed, gathers the patches and runs the product; its
// backward is the product's (dE = dY^T patches, db = column sums of dY) and,
// when the images need a gradient, dpatches = dY E scattered back to the
// pixels (each pixel lies in exactly one patch: a copy, no sums).
// docs/vit-backward.md derives it.
#pragma once
#include "nn/linear.h"

namespace qkv::nn {

// images (B, C, H, W), weight (D, C*P*P), bias (D) or undefined -> (B, N, D).
// Errors name the op and the shapes: a rank other than 4, H or W not
// divisible by P, C*P*P not the weight's columns, a bias not (D).
Var patch_embed(const Var& images, const Var& weight, const Var& bias, int64_t P);

// The kernels (in the float type qkv::real), shared by forward and backward:
//   patch_gather:  x (B, C, H, W) -> patches (B*N, C*P*P)
//   patch_scatter: dpatches (B*N, C*P*P) -> dx (B, C, H, W), the inverse map
void patch_gather(const real* x, int64_t B, int64_t C, int64_t H, int64_t W, int64_t P,
                  real* patches);
void patch_scatter(const real* dpatches, int64_t B, int64_t C, int64_t H, int64_t W, int64_t P,
                   real* dx);

// The projection as a layer: a Linear (C*P*P -> D) read through im2col, so its
// weight is initialised and decayed as every Linear's (weight_decay_mask).
// Parameters weight (D, C*P*P) and bias (D).
class PatchEmbedding : public Linear {
 public:
  PatchEmbedding(int64_t channels, int64_t patch, int64_t D, bool bias = true,
                 Generator& g = default_generator());
  // images (B, C, H, W) -> (B, N, D)
  Var forward(const Var& images) const {
    ModuleScope scope(this);
    return patch_embed(images, weight, bias, patch);
  }
  Var operator()(const Var& images) const { return forward(images); }

  int64_t channels, patch;
};

}  // namespace qkv::nn
