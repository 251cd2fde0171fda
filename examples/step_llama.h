// The computations behind part 3 of examples/step_through.cpp: one RMSNorm
// row and one RoPE pair, the llama-style block's pieces, each number by the
// engine, by hand (examples/by_hand.h) and by finite differences, as parts 1
// and 2 do in examples/step_through.h. tests/test_step_through.cpp checks
// them against numbers worked on paper.
#pragma once
#include "autograd/ops.h"
#include "examples/by_hand.h"
#include "nn/rmsnorm.h"
#include "nn/rope.h"

namespace qkv::step {

// ---- Part 3: the llama-style pieces, one RMSNorm row and one RoPE pair -------

// One row of D = 4 through RMSNorm, and one head of d_k = 2 at positions 0
// and 1 through RoPE (base 10000: pair 0 turns by t radians at position t);
// L = sum(y * dy) for a fixed upstream dy, so that dL/dy = dy.
struct LlamaExample {
  Tensor x, gamma, dy;  // (1,4), (4), (1,4)
  Tensor pair, dpair;   // (1,2,2): positions 0 and 1, each one pair
};

inline LlamaExample llama_example() {
  return {Tensor::from_vector({1, 2, 3, 4}, {1, 4}), Tensor::from_vector({1, 0.5, 2, 1}, {4}),
          Tensor::from_vector({1, -1, 0.5, 2}, {1, 4}),
          Tensor::from_vector({3, -1, 1, 2}, {1, 2, 2}),
          Tensor::from_vector({0.5, 1, 1, -1}, {1, 2, 2})};
}

inline constexpr double kRmsEps = 1e-6;

// The engine's pass: nn::rms_norm and nn::rope, then backward from L.
struct LlamaPass {
  Var x, gamma, y, pair, rotated;
};

inline LlamaPass llama_pass(const LlamaExample& ex) {
  LlamaPass p;
  p.x = Var(ex.x.clone(), true).set_name("x");
  p.gamma = Var(ex.gamma.clone(), true).set_name("gamma");
  p.y = nn::rms_norm(p.x, p.gamma, static_cast<real>(kRmsEps));
  p.pair = Var(ex.pair.clone(), true).set_name("x_pair");
  p.rotated = nn::rope(p.pair, /*heads=*/1, /*base=*/10000, /*pos0=*/0);
  p.y.retain_grad();
  p.rotated.retain_grad();
  Var L = sum(p.y * Var(ex.dy.clone(), false)) + sum(p.rotated * Var(ex.dpair.clone(), false));
  L.backward();
  return p;
}

// Position 1's pair of a (1,2,2) tensor, as a (1,2) tensor and as a matrix.
inline Tensor slice_position_1(const Tensor& t) {
  const Mat m = to_mat(t);  // (2,2): a row per position
  return Tensor::from_vector({static_cast<real>(m(1, 0)), static_cast<real>(m(1, 1))}, {1, 2});
}
inline Mat position_1(const Tensor& t) { return to_mat(slice_position_1(t)); }

// The same by hand, and finite differences of the by-hand forward.
struct LlamaByHand {
  hand::RMSNorm norm;
  hand::RopePair rope;  // position 1's pair, turned by 1 radian
  Mat fd_x, fd_gamma, fd_pair;
};

inline LlamaByHand llama_by_hand(const LlamaExample& ex, bool with_fd) {
  const Mat x = to_mat(ex.x), gamma = to_mat(ex.gamma), dy = to_mat(ex.dy);
  const Mat pair = position_1(ex.pair), dpair = position_1(ex.dpair);
  LlamaByHand h;
  h.norm = hand::rms_norm(x, dy, gamma, kRmsEps);
  h.rope = hand::rope_pair(pair, dpair, /*a=*/1.0);
  if (with_fd) {
    auto loss = [](const Mat& y, const Mat& d) {
      double L = 0;
      for (size_t i = 0; i < y.a.size(); ++i) L += y.a[i] * d.a[i];
      return L;
    };
    h.fd_x = hand::central_difference(
        [&](const Mat& v) { return loss(hand::rms_norm(v, dy, gamma, kRmsEps).y, dy); }, x);
    h.fd_gamma = hand::central_difference(
        [&](const Mat& g) { return loss(hand::rms_norm(x, dy, g, kRmsEps).y, dy); }, gamma);
    h.fd_pair = hand::central_difference(
        [&](const Mat& v) { return loss(hand::rope_pair(v, dpair, 1.0).y, dpair); }, pair);
  }
  return h;
}

}  // namespace qkv::step
