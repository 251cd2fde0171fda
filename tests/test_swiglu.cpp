// SwiGLU in float32: parity with PyTorch (fixture swiglu.safetensors,
// made from plain torch ops in float64: PyTorch
// 1.13 has no SwiGLU module), the hidden-width rule, and the errors it raises.
// The float64 gradient checks are in test_swiglu_grad.cpp.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "errors.h"
#include "fixture.h"
#include "nn/feedforward.h"
#include "nn/swiglu.h"

using namespace qkv;

using qkv::testing::check_close;
using qkv::testing::error_of;
using qkv::testing::has;

TEST_CASE("SwiGLU matches PyTorch composed in float64: output and grads of x and the weights") {
  TensorFile f = load_fixture("swiglu.safetensors");
  nn::SwiGLU block(8, 16);
  load_params(block, f, "swiglu.");
  Var x(f.get("swiglu.in.x").clone(), true);
  Var y = block(x);
  check_close(y.data(), f.get("swiglu.out.y"), "swiglu out.y");
  y.backward(f.get("swiglu.in.upstream"));
  check_close(x.grad(), f.get("swiglu.grad.x"), "swiglu grad.x");
  check_close(block.gate->weight.grad(), f.get("swiglu.grad.gate.weight"), "grad gate.weight");
  check_close(block.up->weight.grad(), f.get("swiglu.grad.up.weight"), "grad up.weight");
  check_close(block.down->weight.grad(), f.get("swiglu.grad.down.weight"), "grad down.weight");
}

TEST_CASE("swiglu_hidden keeps the parameter count of the feed-forward block it replaces") {
  // Llama's rule: int(2 d_ff / 3), up to a multiple of 8.
  CHECK(nn::swiglu_hidden(256) == 176);    // D = 64, d_ff = 4 D: 170 -> 176
  CHECK(nn::swiglu_hidden(2048) == 1368);  // D = 512: 1365 -> 1368
  CHECK(nn::swiglu_hidden(3) == 8);
  for (int64_t D : {16, 64, 256, 512}) {
    const int64_t d_ff = 4 * D, F = nn::swiglu_hidden(d_ff);
    nn::SwiGLU s(D, F);
    nn::FeedForward ffn(D, d_ff);
    CAPTURE(D);
    // Three (F, D) matrices against two (d_ff, D): equal at F = 2/3 d_ff, off
    // by less than the rounding step of 8 hidden units (3 * 8 * D weights).
    const int64_t weights = ffn.num_parameters() - d_ff - D;  // the block's, biases aside
    CHECK(s.num_parameters() == 3 * D * F);
    CHECK(std::abs(s.num_parameters() - weights) < 3 * 8 * D);
    if (D >= 64) CHECK(std::abs(double(s.num_parameters()) / ffn.num_parameters() - 1) < 0.03);
  }
  CHECK(has(error_of([] { nn::swiglu_hidden(0); }), "swiglu_hidden: d_ff must be positive"));
}

TEST_CASE("swiglu rejects weights that do not fit the input, naming the op and every shape") {
  Var x(Tensor::zeros({2, 3, 4}));
  Var wg(Tensor::zeros({6, 4})), wu(Tensor::zeros({6, 4})), wd(Tensor::zeros({4, 6}));
  CHECK_NOTHROW(nn::swiglu(x, wg, wu, wd));
  const std::string msg = error_of([&] { nn::swiglu(x, wg, Var(Tensor::zeros({5, 4})), wd); });
  CHECK(has(msg, "swiglu"));
  CHECK(has(msg, "(2,3,4)"));
  CHECK(has(msg, "(5,4)"));
  CHECK(has(error_of([&] { nn::swiglu(x, wg, wu, Var(Tensor::zeros({6, 4}))); }), "w_down (6,4)"));
  CHECK(has(error_of([] { nn::SwiGLU bad(4, 0); }), "SwiGLU: D and F must be positive"));
}
