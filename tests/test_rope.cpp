// Rotary position embedding in float32: parity with a PyTorch reference in
// float64 written as Meta's Llama writes it (pairs as complex numbers times
// exp(i t theta)), and the errors it raises. The float64 checks are in
// test_rope_grad.cpp.
#include <doctest/doctest.h>

#include <string>

#include "autograd/qkv_autograd.h"
#include "compare.h"
#include "errors.h"
#include "fixture.h"
#include "nn/rope.h"

using namespace qkv;

using qkv::testing::check_close;
using qkv::testing::error_of;
using qkv::testing::has;

TEST_CASE("rope matches PyTorch's complex-number rotation: output and grad of x (fixture rope)") {
  TensorFile f = load_fixture("rope.safetensors");
  const int64_t heads = 2, pos0 = 5;
  Var x(f.get("rope.in.x").clone(), true);
  Var y = nn::rope(x, heads, 10000, pos0);
  check_close(y.data(), f.get("rope.out.y"), "rope out.y");
  y.backward(f.get("rope.in.upstream"));
  check_close(x.grad(), f.get("rope.grad.x"), "rope grad.x");
}

TEST_CASE("rope rejects an odd head size and a width the heads do not divide, naming the shape") {
  Var x(Tensor::zeros({2, 3, 6}));
  CHECK_NOTHROW(nn::rope(x, 3));                        // d_k = 2
  std::string msg = error_of([&] { nn::rope(x, 2); });  // d_k = 3: odd
  CHECK(has(msg, "rope: input (2,3,6) with 2 heads"));
  CHECK(has(msg, "even head size"));
  CHECK(has(error_of([&] { nn::rope(x, 4); }), "rope: input (2,3,6) with 4 heads"));
  CHECK(has(error_of([&] { nn::rope_table(4, 8, 10000, -1); }), "pos0 >= 0"));
}
