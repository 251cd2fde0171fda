// The Vision Transformer's patches, worked (examples/worked_example.cpp,
// docs/vit-backward.md): one image of C = 2 channels, 4 x 4 pixels, cut into
// P x P = 2 x 2 patches. Each pixel holds its address, c + y/10 + x/100
// (1.13: channel 1, row 1, column 3), so a patch's row of `patches` shows
// its order: by the library
// (nn::patch_gather) and by hand (each pixel sent to its row and column).
// Then the patch projection's weight gradient, dE = dY^T patches, by the
// engine (the fused nn::patch_embed), by hand (plain loops in double) and by
// finite differences of the by-hand forward.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/ops.h"
#include "examples/by_hand.h"
#include "models/vit.h"
#include "nn/patch_embed.h"

namespace qkv::step {

inline constexpr int64_t kVitC = 2, kVitSide = 4, kVitP = 2, kVitD = 2;
inline constexpr int64_t kVitN = (kVitSide / kVitP) * (kVitSide / kVitP);  // 4
inline constexpr int64_t kVitK = kVitC * kVitP * kVitP;                    // C*P*P = 8

// The image (C, H, W) as C*H rows of W: row c*H + y; pixel (c, y, x) = c + y/10 + x/100.
inline Mat vit_image() {
  Mat im(kVitC * kVitSide, kVitSide);
  for (int64_t c = 0; c < kVitC; ++c)
    for (int64_t y = 0; y < kVitSide; ++y)
      for (int64_t x = 0; x < kVitSide; ++x) im(c * kVitSide + y, x) = c + y / 10.0 + x / 100.0;
  return im;
}

// By hand, pixel by pixel: (c, y, x) lies in patch n = (y/P)(W/P) + x/P (the
// grid row-major), at column k = (c P + y%P) P + x%P of its row (channel,
// then row, then column within the patch). (N, C*P*P)
inline Mat vit_patches_by_hand(const Mat& image) {
  Mat patches(kVitN, kVitK);
  for (int64_t c = 0; c < kVitC; ++c)
    for (int64_t y = 0; y < kVitSide; ++y)
      for (int64_t x = 0; x < kVitSide; ++x) {
        const int64_t n = (y / kVitP) * (kVitSide / kVitP) + x / kVitP;
        const int64_t k = (c * kVitP + y % kVitP) * kVitP + x % kVitP;
        patches(n, k) = image(c * kVitSide + y, x);
      }
  return patches;
}

// The library's gather of the same image.
inline Mat vit_patches_by_library() {
  const Tensor im = tensor_of(vit_image());  // (C*H, W): the (1, C, H, W) numbers in order
  Tensor patches = Tensor::zeros({kVitN, kVitK});
  nn::patch_gather(im.data(), 1, kVitC, kVitSide, kVitSide, kVitP, patches.data());
  return to_mat(patches);
}

// N + 1 positions, as a ViT of these sizes counts them (models/vit.h).
inline int64_t vit_positions() {
  nn::ViTConfig c;
  c.image = kVitSide, c.channels = kVitC, c.patch = kVitP;
  return c.patches() + 1;
}

// The projection Y = patches E^T + b (N, D), E (D, C*P*P) = (2, 8), and
// L = sum(Y * dY) for a fixed dY (N, D). dE does not depend on E or b.
inline Mat vit_weight() {
  Mat E(kVitD, kVitK);
  for (int64_t d = 0; d < kVitD; ++d)
    for (int64_t k = 0; k < kVitK; ++k) E(d, k) = 0.01 * ((d + 2 * k) % 5 - 2);
  return E;
}

inline Mat vit_dY() {
  Mat dY(kVitN, kVitD);
  dY.a = {1, 0, 0, -1, 1, 0.5, 0.5, 1};
  return dY;
}

struct VitByHand {
  Mat patches;  // (N, C*P*P)
  Mat dE;       // (D, C*P*P): dE = dY^T patches, dE[d, k] = sum_n dY[n, d] patches[n, k]
  Mat db;       // (1, D): column sums of dY
};

inline VitByHand vit_by_hand() {
  VitByHand h;
  h.patches = vit_patches_by_hand(vit_image());
  const Mat dY = vit_dY();
  h.dE = Mat(kVitD, kVitK);
  h.db = Mat(1, kVitD);
  for (int64_t n = 0; n < kVitN; ++n)
    for (int64_t d = 0; d < kVitD; ++d) {
      h.db(0, d) += dY(n, d);
      for (int64_t k = 0; k < kVitK; ++k) h.dE(d, k) += dY(n, d) * h.patches(n, k);
    }
  return h;
}

// L by hand as a function of E (b = 0): sum over n, d of dY[n, d] (patches E^T)[n, d].
inline double vit_loss_by_hand(const Mat& E) {
  const Mat Y = hand::matmul(vit_patches_by_hand(vit_image()), hand::transpose(E)), dY = vit_dY();
  double L = 0;
  for (size_t i = 0; i < Y.a.size(); ++i) L += Y.a[i] * dY.a[i];
  return L;
}

inline Mat vit_fd() { return hand::central_difference(vit_loss_by_hand, vit_weight()); }

struct VitPass {
  int64_t N = 0;  // rows of Y
  Mat dE, db;     // (D, C*P*P), (1, D)
};

inline VitPass vit_pass() {
  Tensor images = Tensor::zeros({1, kVitC, kVitSide, kVitSide});
  const Mat im = vit_image();
  for (size_t i = 0; i < im.a.size(); ++i) images.data()[i] = static_cast<real>(im.a[i]);
  Var E(tensor_of(vit_weight()), true), b(Tensor::zeros({kVitD}), true);
  Var Y = nn::patch_embed(Var(images, false), E, b, kVitP);  // (1, N, D)
  Tensor dY = Tensor::zeros({1, kVitN, kVitD});
  const Mat dy = vit_dY();
  for (size_t i = 0; i < dy.a.size(); ++i) dY.data()[i] = static_cast<real>(dy.a[i]);
  sum(Y * Var(dY, false)).backward();
  VitPass p;
  p.N = Y.shape()[1];
  p.dE = to_mat(E.grad());
  p.db = to_mat(b.grad());
  return p;
}

}  // namespace qkv::step
