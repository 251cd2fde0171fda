// The Vision Transformer's new ops in float64 (nn/patch_embed.h,
// nn/class_token.h): each backward against finite differences, each fused op
// against the same maths composed from primitive ops (reshape, permute,
// matmul), and a whole tiny ViT's loss against finite differences for every
// parameter. docs/vit-backward.md derives what these check.
#include <doctest/doctest.h>

#include "autograd/qkv_autograd.h"
#include "fused_vs_composed.h"
#include "models/vit.h"
#include "nn/class_token.h"
#include "nn/cross_entropy.h"
#include "nn/patch_embed.h"
#include "nn/positional.h"
#include "test_seed.h"

using namespace qkv;

using qkv::testing::test_generator;

namespace {

// Images (B, C, H, W) = (2, 2, 4, 6) in 2 x 2 patches: a grid of 2 x 3, N = 6,
// patches of C*P*P = 8 numbers, projected to D = 3.
constexpr int64_t kB = 2, kC = 2, kH = 4, kW = 6, kP = 2, kN = 6, kK = 8, kD = 3;

Var leaf(const Shape& s, Generator& g, const char* name) {
  return Var(Tensor::normal(s, 0, 1, g), true).set_name(name);
}

// The patch projection from primitives: (B, C, H, W) -> (B, C, H/P, P, W/P, P)
// -> (B, H/P, W/P, C, P, P) -> (B, N, C*P*P), then x E^T + b.
Var composed_patch_embed(const Var& images, const Var& weight, const Var& bias) {
  Var x = reshape(images, {kB, kC, kH / kP, kP, kW / kP, kP});
  x = reshape(permute(x, {0, 2, 4, 1, 3, 5}), {kB, kN, kK});
  Var y = matmul(x, weight, false, true);  // (B, N, K) x (K, D) -> (B, N, D)
  return bias.defined() ? y + bias : y;
}

// (n+1, n) shift matrix: row 1+i is e_i, row 0 zero; e0 (n+1, 1) = e_0.
Tensor shift(int64_t n) {
  Tensor s = Tensor::zeros({n + 1, n});
  for (int64_t i = 0; i < n; ++i) s.at({i + 1, i}) = 1;
  return s;
}
Tensor first_unit(int64_t n) {
  Tensor e = Tensor::zeros({n, 1});
  e.at({0, 0}) = 1;
  return e;
}

nn::ViTConfig tiny_vit() {
  nn::ViTConfig c;
  c.image = 4;
  c.channels = 2;
  c.patch = 2;  // N = 4, T = 5
  c.classes = 3;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 2;
  c.d_ff = 12;
  return c;
}

// Every parameter of the model drawn afresh (the class token is zeros and the
// position table small at initialisation: a zero cannot hide a wrong term).
void randomise(nn::ViT& m, Generator& g) {
  for (Var p : m.parameters()) p.data().copy_(Tensor::normal(p.shape(), 0, 0.5, g));
}

void check_vit_gradients(const nn::ViTConfig& c) {
  Generator g = test_generator();
  nn::ViT model(c);
  randomise(model, g);
  Var images(Tensor::uniform({3, c.channels, c.image, c.image}, 0, 1, g), true);
  const std::vector<int64_t> labels{0, 2, 1};  // label 0 is a class
  std::vector<Var> inputs{images};
  for (const Var& p : model.parameters()) inputs.push_back(p);
  auto r = gradcheck(
      [&](const std::vector<Var>& v) { return nn::cross_entropy(model.forward(v[0]), labels); },
      inputs);
  INFO(r.report);
  CHECK(r.ok);
  int64_t n = images.numel();
  for (const Var& p : model.parameters()) n += p.numel();
  CHECK(r.checked == n);
}

}  // namespace

TEST_CASE("patch_embed backward matches finite differences for the images, weight and bias") {
  Generator g = test_generator();
  Var x = leaf({kB, kC, kH, kW}, g, "images"), w = leaf({kD, kK}, g, "weight"),
      b = leaf({kD}, g, "bias");
  auto r = gradcheck(
      [](const std::vector<Var>& v) { return nn::patch_embed(v[0], v[1], v[2], kP); }, {x, w, b});
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == kB * kC * kH * kW + kD * kK + kD);
}

TEST_CASE("patch_embed without bias, one channel, P = 1 and P = H: finite differences") {
  Generator g = test_generator();
  for (int64_t P : {1, 2, 4}) {
    CAPTURE(P);
    Var x = leaf({2, 1, 4, 4}, g, "images"), w = leaf({kD, P * P}, g, "weight");
    auto r = gradcheck(
        [P](const std::vector<Var>& v) { return nn::patch_embed(v[0], v[1], Var(), P); }, {x, w});
    INFO(r.report);
    CHECK(r.ok);
  }
}

TEST_CASE(
    "patch_embed fused equals reshape-permute-matmul composed from ops (output, dX, dE, db)") {
  Generator g = test_generator();
  Var x = leaf({kB, kC, kH, kW}, g, "images"), w = leaf({kD, kK}, g, "weight"),
      b = leaf({kD}, g, "bias");
  testing::check_fused_equals_composed(
      [](const std::vector<Var>& v) { return nn::patch_embed(v[0], v[1], v[2], kP); },
      [](const std::vector<Var>& v) { return composed_patch_embed(v[0], v[1], v[2]); }, {x, w, b});
}

TEST_CASE("patch_embed leaves the images without a gradient when they do not need one") {
  Generator g = test_generator();
  Var x(Tensor::normal({kB, kC, kH, kW}, 0, 1, g), false);
  Var w = leaf({kD, kK}, g, "weight"), b = leaf({kD}, g, "bias");
  testing::check_fused_equals_composed(
      [](const std::vector<Var>& v) { return nn::patch_embed(v[0], v[1], v[2], kP); },
      [](const std::vector<Var>& v) { return composed_patch_embed(v[0], v[1], v[2]); }, {x, w, b});
}

TEST_CASE("prepend_class_token backward matches finite differences for x and the token") {
  Generator g = test_generator();
  Var x = leaf({3, 4, kD}, g, "x"), c = leaf({1, 1, kD}, g, "cls_token");
  auto r = gradcheck([](const std::vector<Var>& v) { return nn::prepend_class_token(v[0], v[1]); },
                     {x, c});
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 3 * 4 * kD + kD);
}

TEST_CASE("prepend_class_token fused equals shift x + e0 c composed from ops") {
  Generator g = test_generator();
  Var x = leaf({3, 4, kD}, g, "x"), c = leaf({1, 1, kD}, g, "cls_token");
  testing::check_fused_equals_composed(
      [](const std::vector<Var>& v) { return nn::prepend_class_token(v[0], v[1]); },
      [](const std::vector<Var>& v) {
        // (5, 4) x (3, 4, D) -> (3, 5, D), rows 1..4; plus (5, 1) * (1, D) in row 0
        return matmul(Var(shift(4)), v[0]) + Var(first_unit(5)) * reshape(v[1], {1, kD});
      },
      {x, c});
}

TEST_CASE("class_token_output backward matches finite differences; fused equals e0^T h") {
  Generator g = test_generator();
  Var h = leaf({3, 5, kD}, g, "h");
  auto r = gradcheck([](const std::vector<Var>& v) { return nn::class_token_output(v[0]); }, {h});
  INFO(r.report);
  CHECK(r.ok);
  testing::check_fused_equals_composed(
      [](const std::vector<Var>& v) { return nn::class_token_output(v[0]); },
      [](const std::vector<Var>& v) {
        // (5, 1)^T x (3, 5, D) -> (3, 1, D) -> (3, D)
        return reshape(matmul(Var(first_unit(5)), v[0], true, false), {3, kD});
      },
      {h});
}

TEST_CASE("class token and position table together: finite differences for x, c and E_pos") {
  Generator g = test_generator();
  Var x = leaf({2, 4, kD}, g, "x"), c = leaf({1, 1, kD}, g, "cls_token"),
      pos = leaf({5, kD}, g, "pos_embed");
  auto r = gradcheck(
      [](const std::vector<Var>& v) {
        return nn::add_positions(nn::prepend_class_token(v[0], v[1]), v[2]);
      },
      {x, c, pos});
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked == 2 * 4 * kD + kD + 5 * kD);
}

TEST_CASE("a tiny ViT's loss: finite differences for the images and every parameter (Pre-LN)") {
  check_vit_gradients(tiny_vit());
}

TEST_CASE("a tiny ViT's loss, Post-LN with RMSNorm, SwiGLU and no biases: finite differences") {
  nn::ViTConfig c = tiny_vit();
  c.pre_norm = false;
  c.norm = "rms";
  c.bias = false;
  c.activation = nn::Activation::SwiGLU;
  c.layers = 1;
  check_vit_gradients(c);
}
