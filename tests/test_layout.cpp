// core layout: permute and transpose values (against index arithmetic) and
// their errors.
#include <doctest/doctest.h>

#include "errors.h"
#include "test_seed.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/qkv_core.h"

using namespace qkv;

namespace {
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_generator;
}  // namespace

TEST_CASE("transpose of a (2,3) matrix swaps rows and columns") {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = transpose(a, 0, 1);
  REQUIRE(t.shape() == Shape{3, 2});
  CHECK(t.to_vector() == std::vector<real>{1, 4, 2, 5, 3, 6});
  CHECK(transpose(a, -1, -2).to_vector() == t.to_vector());
  CHECK(transpose(a, 1, 0).to_vector() == t.to_vector());
  // A copy: the original is untouched and storage is not shared.
  CHECK_FALSE(t.shares_storage_with(a));
  t.at({0, 0}) = 100;
  CHECK(a.at({0, 0}) == 1);
  // Transposing twice gives the original back; transposing an axis with itself is a copy.
  CHECK(transpose(t, 0, 1).shape() == a.shape());
  CHECK(transpose(a, 1, 1).to_vector() == a.to_vector());
}

TEST_CASE("transpose of the last two dims of a (2,3,4) tensor moves every element") {
  Tensor a = Tensor::arange(24).reshape({2, 3, 4});
  Tensor t = transpose(a, 1, 2);
  REQUIRE(t.shape() == Shape{2, 4, 3});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) CHECK(t.at({i, k, j}) == a.at({i, j, k}));
  Tensor t02 = transpose(a, 0, 2);
  REQUIRE(t02.shape() == Shape{4, 3, 2});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) CHECK(t02.at({k, j, i}) == a.at({i, j, k}));
}

TEST_CASE("permute: out[i0..] = a at the permuted index, for every permutation of rank 4") {
  // (B, T, H, d_k) -> (B, H, T, d_k) is attention's split of heads; check them all.
  Tensor a = Tensor::arange(2 * 3 * 4 * 5).reshape({2, 3, 4, 5});
  std::vector<int> p = {0, 1, 2, 3};
  int count = 0;
  do {
    INFO("perm " << p[0] << p[1] << p[2] << p[3]);
    Tensor y = permute(a, p);
    for (int d = 0; d < 4; ++d) REQUIRE(y.shape()[d] == a.shape()[p[d]]);
    // Walk y; the input index has idx_in[p[d]] = idx_out[d].
    const auto st = strides_of(a.shape());
    bool all = true;
    for (int64_t f = 0; f < y.numel(); ++f) {
      int64_t rem = f, in = 0;
      for (int d = 3; d >= 0; --d) {
        const int64_t idx = rem % y.shape()[d];
        rem /= y.shape()[d];
        in += idx * st[p[d]];
      }
      all = all && y.data()[f] == a.data()[in];
    }
    CHECK(all);
    ++count;
  } while (std::next_permutation(p.begin(), p.end()));
  CHECK(count == 24);
}

TEST_CASE("permute accepts negative dims and inverse_permutation undoes it") {
  Tensor a = Tensor::arange(24).reshape({2, 3, 4});
  Tensor y = permute(a, {-1, 0, -2});  // == {2, 0, 1}
  CHECK(y.shape() == Shape{4, 2, 3});
  CHECK(y.to_vector() == permute(a, {2, 0, 1}).to_vector());
  const std::vector<int> inv = inverse_permutation({2, 0, 1});
  CHECK(inv == std::vector<int>{1, 2, 0});
  CHECK(inverse_permutation({-1, 0, -2}) == inv);
  Tensor back = permute(y, inv);
  CHECK(back.shape() == a.shape());
  CHECK(back.to_vector() == a.to_vector());
}

TEST_CASE("permute of a large tensor (parallel rows) matches the index formula") {
  Generator g = test_generator();
  Tensor a = Tensor::uniform({8, 64, 4, 32}, -1, 1, g);  // (B, T, H, d_k)
  Tensor y = permute(a, {0, 2, 1, 3});                   // (B, H, T, d_k)
  bool all = true;
  for (int64_t b = 0; b < 8; b += 3)
    for (int64_t t = 0; t < 64; t += 7)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t k = 0; k < 32; k += 5) all = all && y.at({b, h, t, k}) == a.at({b, t, h, k});
  CHECK(all);
}

TEST_CASE("permute and transpose of rank-0, rank-1 and empty tensors") {
  Tensor s = permute(Tensor::scalar(3), {});
  CHECK(s.dim() == 0);
  CHECK(s.item() == 3);
  CHECK(permute(Tensor::arange(4), {0}).to_vector() == std::vector<real>{0, 1, 2, 3});
  CHECK(transpose(Tensor::zeros({2, 0, 3}), 0, 2).shape() == Shape{3, 0, 2});
}

TEST_CASE("permute errors: wrong number of dims, out-of-range axis, repeated axis") {
  Tensor a = Tensor::zeros({2, 3, 4});
  std::string msg = error_of([&] { permute(a, {0, 1}); });
  CHECK(has(msg, "permute"));
  CHECK(has(msg, "(2,3,4)"));
  CHECK(has(msg, "[0,1]"));
  msg = error_of([&] { permute(a, {0, 1, 3}); });
  CHECK(has(msg, "permute: axis 3 out of range"));
  CHECK(has(msg, "(2,3,4)"));
  msg = error_of([&] { permute(a, {0, 1, -4}); });
  CHECK(has(msg, "permute: axis -4 out of range"));
  msg = error_of([&] { permute(a, {0, 1, 1}); });
  CHECK(has(msg, "permute"));
  CHECK(has(msg, "repeat"));
  CHECK(has(msg, "[0,1,1]"));
  CHECK(has(msg, "(2,3,4)"));
  // -1 and 2 are the same axis.
  CHECK(has(error_of([&] { permute(a, {2, 0, -1}); }), "repeat"));
  CHECK(has(error_of([] { permute(Tensor(), {}); }), "permute: tensor is undefined"));
}

TEST_CASE("transpose errors name the op, the bad axis and the shape") {
  Tensor a = Tensor::zeros({2, 3});
  std::string msg = error_of([&] { transpose(a, 0, 2); });
  CHECK(has(msg, "transpose: axis 2 out of range"));
  CHECK(has(msg, "(2,3)"));
  msg = error_of([&] { transpose(a, -3, 0); });
  CHECK(has(msg, "transpose: axis -3"));
  CHECK(has(error_of([] { transpose(Tensor::scalar(1), 0, 0); }), "transpose"));
}
