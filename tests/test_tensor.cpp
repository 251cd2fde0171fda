// core::Tensor: creation, randomness, handle semantics, element access,
// printing and the in-place ops.
#include <doctest/doctest.h>

#include "errors.h"
#include "test_seed.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/qkv_core.h"

using namespace qkv;

namespace {
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_generator;
using qkv::testing::test_seed;
std::string str(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}
}  // namespace

// ---- creation -----------------------------------------------------------------

TEST_CASE("zeros/ones/full fill every element and keep the requested shape") {
  Tensor z = Tensor::zeros({2, 3});
  Tensor o = Tensor::ones({4});
  Tensor f = Tensor::full({2, 2, 2}, real(-1.5));
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.dim() == 2);
  CHECK(z.numel() == 6);
  CHECK(z.to_vector() == std::vector<real>(6, 0));
  CHECK(o.to_vector() == std::vector<real>(4, 1));
  CHECK(f.numel() == 8);
  CHECK(f.to_vector() == std::vector<real>(8, real(-1.5)));
  CHECK(f.size(0) == 2);
  CHECK(f.size(-1) == 2);
}

TEST_CASE("scalar is rank 0 with one element") {
  Tensor s = Tensor::scalar(3);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 3);
  CHECK(s.shape().empty());
}

TEST_CASE("a zero-size dimension makes an empty tensor") {
  Tensor e = Tensor::zeros({3, 0});
  CHECK(e.numel() == 0);
  CHECK(e.shape() == Shape{3, 0});
  CHECK(e.to_vector().empty());
}

TEST_CASE("arange counts from start to end (exclusive) by step") {
  CHECK(Tensor::arange(5).to_vector() == std::vector<real>{0, 1, 2, 3, 4});
  CHECK(Tensor::arange(2, 8, 2).to_vector() == std::vector<real>{2, 4, 6});
  CHECK(Tensor::arange(2, 9, 2).to_vector() == std::vector<real>{2, 4, 6, 8});
  CHECK(Tensor::arange(3, 0, -1).to_vector() == std::vector<real>{3, 2, 1});
  CHECK(Tensor::arange(5, 5).numel() == 0);
  CHECK(Tensor::arange(5, 2).numel() == 0);
  CHECK(has(error_of([] { Tensor::arange(0, 1, 0); }), "arange"));
}

TEST_CASE("from_vector lays values out row-major and checks the count") {
  Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.at({0, 0}) == 1);
  CHECK(t.at({0, 2}) == 3);
  CHECK(t.at({1, 0}) == 4);
  CHECK(t.at({1, 2}) == 6);
  Tensor v = Tensor::from_vector({7, 8, 9});
  CHECK(v.shape() == Shape{3});
  const std::string msg = error_of([] { Tensor::from_vector({1, 2, 3}, {2, 2}); });
  CHECK(has(msg, "from_vector"));
  CHECK(has(msg, "(2,2)"));
  CHECK(has(msg, "3 values"));
}

TEST_CASE("negative dimensions are rejected at creation") {
  const std::string msg = error_of([] { Tensor::zeros({2, -3}); });
  CHECK(has(msg, "negative"));
  CHECK(has(msg, "(2,-3)"));
}

// ---- sizes that overflow ----------------------------------------------------------
// Each of these must throw before anything is allocated: under ASan an attempt
// to allocate 2^64 bytes would abort the whole test binary instead.

TEST_CASE(
    "a shape whose element count overflows 64 bits throws a qkv::Error naming the op and the "
    "dims") {
  const int64_t big = int64_t{1} << 40;  // (2^40)^2 = 2^80 elements
  const std::string msg = error_of([&] { Tensor::zeros({big, big}); });
  CHECK(has(msg, "Tensor::zeros"));
  CHECK(has(msg, "(1099511627776,1099511627776)"));
  CHECK(has(msg, "element count overflows"));
  CHECK(has(error_of([&] {
              Tensor::empty({big, big});
            }),
            "Tensor::empty: shape (1099511627776,1099511627776)"));
  CHECK(has(error_of([&] { Tensor::ones({big, big}); }), "Tensor::ones"));
  CHECK(has(error_of([&] { Tensor::full({big, big}, 2); }), "Tensor::full"));
  CHECK(has(error_of([&] {
              Tensor::normal({2, big, big}, 0, 1);
            }),
            "Tensor::normal: shape (2,1099511627776,1099511627776)"));
  CHECK(has(error_of([&] { Tensor::uniform({big, big}, 0, 1); }), "Tensor::uniform"));
  // from_vector compares the count with numel(shape): the shape is checked first.
  CHECK(has(error_of([&] {
              Tensor::from_vector({1, 2}, {big, big});
            }),
            "Tensor::from_vector: shape (1099511627776"));
  // INT64_MAX * 2 is the smallest kind of overflow: one doubling past the top.
  const int64_t top = std::numeric_limits<int64_t>::max();
  CHECK(has(error_of([&] { Tensor::zeros({top, 2}); }), "element count overflows"));
}

TEST_CASE(
    "a shape whose element count fits int64 but whose size in bytes does not throws naming the "
    "dims") {
  // 2^31 * 2^31 = 2^62 elements fit in int64; times sizeof(real) >= 4 bytes they do not.
  const int64_t d = int64_t{1} << 31;
  const std::string msg = error_of([&] { Tensor::zeros({d, d}); });
  CHECK(has(msg, "Tensor::zeros: shape (2147483648,2147483648)"));
  CHECK(has(msg, "size in bytes"));
  CHECK(has(error_of([&] { Tensor::empty({d, d}); }), "size in bytes"));
  CHECK(shape_too_large(Shape{d, d}));
  CHECK_FALSE(shape_too_large(Shape{d, 2}));
}

TEST_CASE("a zero-size dimension does not hide an overflowing product of the others") {
  // (0, 2^40, 2^40) holds no element, but its strides overflow: refused too.
  const int64_t big = int64_t{1} << 40;
  CHECK(has(error_of([&] { Tensor::zeros({0, big, big}); }), "(0,1099511627776,1099511627776)"));
  // A zero dim beside reasonable ones is fine.
  CHECK(Tensor::zeros({0, 1 << 20, 1 << 20}).numel() == 0);
}

TEST_CASE(
    "reshape into a shape whose size overflows throws naming both shapes, with or without -1") {
  Tensor a = Tensor::arange(24);
  const int64_t big = int64_t{1} << 40;
  std::string msg = error_of([&] { a.reshape({big, big}); });
  CHECK(has(msg, "reshape"));
  CHECK(has(msg, "(24)"));
  CHECK(has(msg, "(1099511627776,1099511627776)"));
  // With -1 the known dims are multiplied to infer it: that product must not overflow.
  msg = error_of([&] { a.reshape({-1, big, big}); });
  CHECK(has(msg, "(-1,1099511627776,1099511627776)"));
  CHECK(has(msg, "too large"));
  // Zero among huge dims (0 * 2^80 elements) and a negative dim other than -1.
  CHECK(has(error_of([&] { a.reshape({0, big, big}); }), "reshape"));
  CHECK(has(error_of([&] { a.reshape({-3, 8}); }), "negative dimension in shape (-3,8)"));
}

TEST_CASE("arange with more elements than fit in 64 bits throws instead of casting") {
  CHECK(has(error_of([] { Tensor::arange(0, 1e30); }), "arange"));
  CHECK(has(error_of([] { Tensor::arange(0, std::numeric_limits<real>::infinity()); }), "arange"));
}

#if !defined(__SANITIZE_ADDRESS__)
// (Not under ASan: its allocator aborts on a request this big instead of failing it.)
TEST_CASE(
    "a valid shape too big for memory throws a qkv::Error naming the shape, not std::bad_alloc") {
  const int64_t n = int64_t{1} << 58;  // 2^58 reals: 1 EiB or more, fits int64 bytes
  const std::string msg = error_of([&] { Tensor::empty({n}); });
  CHECK(has(msg, "Tensor::empty: cannot allocate"));
  CHECK(has(msg, "(288230376151711744)"));
}
#endif

TEST_CASE("uniform with a seeded Generator is reproducible and within [lo, hi)") {
  // The same seed twice, and the seed next to it (splitmix64 makes neighbours unrelated).
  const uint64_t seed = test_seed();
  Generator g1(seed), g2(seed), g3(seed + 1);
  Tensor a = Tensor::uniform({10000}, -2, 3, g1);
  Tensor b = Tensor::uniform({10000}, -2, 3, g2);
  Tensor c = Tensor::uniform({10000}, -2, 3, g3);
  CHECK(a.to_vector() == b.to_vector());
  CHECK(a.to_vector() != c.to_vector());
  double mean = 0;
  for (real v : a.to_vector()) {
    CHECK(v >= -2);
    CHECK(v < 3);
    mean += v;
  }
  mean /= 10000;
  // The mean of U(-2, 3) is 0.5, its standard error 5 / sqrt(12 * 10000) ~ 0.014;
  // Approx(0.5).epsilon(0.1) allows 0.1 * (1 + 0.5) = 0.15, ten of them.
  CHECK(mean == doctest::Approx(0.5).epsilon(0.1));
  // The stream moves on: a second draw from the same generator differs.
  Tensor a2 = Tensor::uniform({10000}, -2, 3, g1);
  CHECK(a2.to_vector() != a.to_vector());
}

TEST_CASE("normal with a seeded Generator is reproducible and has the requested moments") {
  const uint64_t seed = test_seed();  // as above: the same seed twice, then its neighbour
  Generator g1(seed), g2(seed), g3(seed + 1);
  Tensor a = Tensor::normal({4000}, 1, 2, g1);
  Tensor b = Tensor::normal({4000}, 1, 2, g2);
  Tensor c = Tensor::normal({4000}, 1, 2, g3);
  CHECK(a.to_vector() == b.to_vector());
  CHECK(a.to_vector() != c.to_vector());
  double m = 0, v = 0;
  for (real x : a.to_vector()) m += x;
  m /= a.numel();
  for (real x : a.to_vector()) v += (x - m) * (x - m);
  v /= a.numel();
  // Standard error of the mean is 2/sqrt(4000) ~ 0.03: 0.15 is five of them.
  CHECK(std::fabs(m - 1) < 0.15);
  CHECK(std::sqrt(v) == doctest::Approx(2).epsilon(0.05));
}

TEST_CASE("manual_seed makes the default generator repeat its stream") {
  // Literal seeds (not test_seed()): the test is about manual_seed itself, a
  // seed given twice and its neighbour.
  manual_seed(123);
  Tensor a = Tensor::normal({16}, 0, 1);
  manual_seed(123);
  Tensor b = Tensor::normal({16}, 0, 1);
  manual_seed(124);
  Tensor c = Tensor::normal({16}, 0, 1);
  CHECK(a.to_vector() == b.to_vector());
  CHECK(a.to_vector() != c.to_vector());
}

TEST_CASE("Generator state round-trips: set_state resumes the exact stream") {
  Generator g = test_generator();
  g.normal();  // leaves a cached normal in the state
  const Generator::State st = g.state();
  const double n1 = g.normal(), n2 = g.normal();
  const uint64_t u1 = g.next_u64();
  g.set_state(st);
  CHECK(g.normal() == n1);
  CHECK(g.normal() == n2);
  CHECK(g.next_u64() == u1);
}

TEST_CASE("randint stays in [lo, hi) and rejects an empty range") {
  Generator g = test_generator();
  bool seen_lo = false, seen_hi = false;
  for (int i = 0; i < 1000; ++i) {
    const int64_t r = g.randint(-3, 4);
    CHECK(r >= -3);
    CHECK(r < 4);
    seen_lo |= r == -3;
    seen_hi |= r == 3;
  }
  CHECK(seen_lo);
  CHECK(seen_hi);
  CHECK(has(error_of([&] { g.randint(2, 2); }), "randint"));
}

// ---- handle semantics ------------------------------------------------------------

TEST_CASE("copying a Tensor shares storage: writes through one show in the other") {
  Tensor a = Tensor::zeros({2, 2});
  Tensor b = a;
  CHECK(b.shares_storage_with(a));
  b.at({1, 1}) = 5;
  CHECK(a.at({1, 1}) == 5);
  CHECK(a.storage_use_count() == 2);
}

TEST_CASE("reshape and view share storage and keep row-major order") {
  Tensor a = Tensor::arange(6);
  Tensor r = a.reshape({2, 3});
  Tensor v = a.view({3, 2});
  CHECK(r.shares_storage_with(a));
  CHECK(v.shares_storage_with(a));
  CHECK(r.shape() == Shape{2, 3});
  CHECK(r.at({1, 0}) == 3);
  CHECK(v.at({2, 1}) == 5);
  r.at({0, 1}) = 100;
  CHECK(a.to_vector()[1] == 100);
  CHECK(v.at({0, 1}) == 100);
  CHECK(a.shape() == Shape{6});  // the original keeps its shape
}

TEST_CASE("reshape infers one -1 dimension and rejects impossible shapes") {
  Tensor a = Tensor::arange(24);
  CHECK(a.reshape({2, -1, 4}).shape() == Shape{2, 3, 4});
  CHECK(a.reshape({-1}).shape() == Shape{24});
  CHECK(a.reshape({4, -1}).shape() == Shape{4, 6});
  std::string msg = error_of([&] { a.reshape({5, -1}); });
  CHECK(has(msg, "reshape"));
  CHECK(has(msg, "(24)"));
  CHECK(has(msg, "(5,-1)"));
  msg = error_of([&] { a.reshape({-1, -1}); });
  CHECK(has(msg, "reshape"));
  CHECK(has(msg, "-1"));
  msg = error_of([&] { a.reshape({5, 5}); });
  CHECK(has(msg, "reshape"));
  CHECK(has(msg, "(5,5)"));
  CHECK(has(msg, "(24)"));
  CHECK(has(error_of([&] { a.reshape({-2, -12}); }), "reshape"));
}

TEST_CASE("clone is a deep copy: it does not share storage") {
  Tensor a = Tensor::from_vector({1, 2, 3});
  Tensor c = a.clone();
  CHECK_FALSE(c.shares_storage_with(a));
  CHECK(c.to_vector() == a.to_vector());
  c.at({0}) = 9;
  CHECK(a.at({0}) == 1);
  CHECK(a.storage_use_count() == 1);
}

TEST_CASE("slice0 selects rows, shares storage and checks its range") {
  Tensor a = Tensor::arange(12).reshape({4, 3});
  Tensor s = a.slice0(1, 3);
  CHECK(s.shape() == Shape{2, 3});
  CHECK(s.numel() == 6);
  CHECK(s.to_vector() == std::vector<real>{3, 4, 5, 6, 7, 8});
  CHECK(s.shares_storage_with(a));
  s.at({0, 0}) = -1;
  CHECK(a.at({1, 0}) == -1);
  // A slice of a slice, a reshape of a slice, and a clone of a slice.
  CHECK(s.slice0(1, 2).to_vector() == std::vector<real>{6, 7, 8});
  CHECK(s.reshape({3, 2}).at({2, 1}) == 8);
  CHECK(s.clone().to_vector() == s.to_vector());
  CHECK(a.slice0(2, 2).numel() == 0);
  for (auto range : {std::pair<int64_t, int64_t>{-1, 2}, {3, 5}, {3, 2}}) {
    const std::string msg = error_of([&] { a.slice0(range.first, range.second); });
    CHECK(has(msg, "slice0"));
    CHECK(has(msg, "(4,3)"));
  }
  CHECK(has(error_of([] { Tensor::scalar(1).slice0(0, 1); }), "slice0"));
}

TEST_CASE("item and at read values; wrong counts and out-of-range indices throw") {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(Tensor::from_vector({7}, {1, 1}).item() == 7);
  std::string msg = error_of([&] { a.item(); });
  CHECK(has(msg, "item"));
  CHECK(has(msg, "(2,3)"));
  msg = error_of([&] { a.at({2, 0}); });
  CHECK(has(msg, "at"));
  CHECK(has(msg, "(2,3)"));
  CHECK(has(error_of([&] { a.at({0, 3}); }), "out of range"));
  CHECK(has(error_of([&] { a.at({0, -1}); }), "out of range"));
  CHECK(has(error_of([&] { a.at({0}); }), "1 indices"));
  CHECK(has(error_of([&] { a.at({0, 0, 0}); }), "3 indices"));
  const Tensor& ca = a;
  CHECK(ca.at({1, 1}) == 5);
  CHECK(has(error_of([&] { ca.at({5, 5}); }), "out of range"));
}

TEST_CASE("an undefined Tensor reports the op instead of crashing") {
  Tensor u;
  CHECK_FALSE(u.defined());
  CHECK(u.data() == nullptr);
  CHECK(has(error_of([&] { u.item(); }), "item: tensor is undefined"));
  CHECK(has(error_of([&] { u.reshape({1}); }), "reshape"));
  CHECK(has(error_of([&] { u.clone(); }), "clone"));
  CHECK(has(error_of([&] { u.fill_(1); }), "fill_"));
  CHECK(str(u) == "tensor(undefined)");
}

// ---- rank limit -------------------------------------------------------------------

// A count that is really a negative number converted to size_t must give the
// same clear error, not an attempt to allocate it.
TEST_CASE("a Shape of a huge rank count is rejected with a qkv::Error naming the rank") {
  const size_t huge = static_cast<size_t>(-1);
  CHECK_THROWS_AS(Shape(huge, 1), qkv::Error);
  CHECK(has(error_of([&] { Shape(huge, 1); }), "exceeds the maximum rank 8"));
}

TEST_CASE("ranks above kMaxRank are rejected with the rank and the dims in the message") {
  // A Shape holds at most kMaxRank dims inline, so the check happens where a
  // longer list becomes a Shape: here, the vector passed to each function.
  const Shape ok(kMaxRank, 1);
  const std::vector<int64_t> big(kMaxRank + 1, 1);
  CHECK(Tensor::zeros(ok).dim() == kMaxRank);
  std::string msg = error_of([&] { Tensor::zeros(big); });
  CHECK(has(msg, "rank 9"));
  CHECK(has(msg, "(1,1,1,1,1,1,1,1,1)"));
  CHECK(has(error_of([&] { Tensor::ones({1}).reshape(big); }), "rank 9"));
  CHECK(has(error_of([&] { Tensor::from_vector({1}, big); }), "rank 9"));
  CHECK(has(error_of([&] { Tensor::normal(big, 0, 1); }), "rank 9"));
  CHECK(has(error_of([&] { Shape(kMaxRank + 1, 1); }), "rank 9"));
  Shape grown(kMaxRank, 2);
  msg = error_of([&] { grown.push_back(3); });
  CHECK(has(msg, "rank 9"));
  CHECK(has(msg, "(2,2,2,2,2,2,2,2,3)"));
  CHECK(grown.size() == static_cast<size_t>(kMaxRank));  // unchanged by the failed push
}

TEST_CASE("Shape reads like the vector it replaces: compare, insert, erase, convert") {
  Shape s{2, 3, 4};
  CHECK(s.size() == 3);
  CHECK(s == Shape(std::vector<int64_t>{2, 3, 4}));
  CHECK(s != Shape{2, 3});
  CHECK(s != Shape{2, 3, 5});
  CHECK(Shape{} == Shape());
  s.insert(s.begin() + 1, 7);
  CHECK(s == Shape{2, 7, 3, 4});
  s.erase(s.begin());
  CHECK(s == Shape{7, 3, 4});
  s.pop_back();
  CHECK(s == Shape{7, 3});
  CHECK(s.front() == 7);
  CHECK(s.back() == 3);
  CHECK(std::vector<int64_t>(s.begin(), s.end()) == std::vector<int64_t>{7, 3});
  CHECK(strides_of(Shape{2, 3, 4}) == Shape{12, 4, 1});
}

// ---- printing ---------------------------------------------------------------------

TEST_CASE("printing shows the values and the shape") {
  const std::string s = str(Tensor::from_vector({1.5f, -2.25f, 3, 4}, {2, 2}));
  CHECK(has(s, "tensor("));
  CHECK(has(s, "1.5000"));
  CHECK(has(s, "-2.2500"));
  CHECK(has(s, "4.0000"));
  CHECK(has(s, "shape=(2,2)"));
  CHECK_FALSE(has(s, "..."));
  // Integral tensors print like PyTorch's "1.", "2.".
  const std::string i = str(Tensor::arange(3));
  CHECK(has(i, "0."));
  CHECK(has(i, "2."));
  CHECK(has(i, "shape=(3)"));
  const std::string sc = str(Tensor::scalar(real(0.5)));
  CHECK(has(sc, "0.5000"));
  CHECK(has(sc, "shape=()"));
}

TEST_CASE("printing a big tensor truncates the middle with ...") {
  // 2000 elements > the 1000-element threshold: first and last 3 of each row.
  const std::string s = str(Tensor::arange(2000).reshape({2, 1000}));
  CHECK(has(s, "..."));
  CHECK(has(s, "shape=(2,1000)"));
  CHECK(has(s, "999."));
  CHECK(has(s, "1997."));
  CHECK(has(s, "1000."));
  CHECK_FALSE(has(s, " 500."));
  CHECK(s.size() < 400);
  // A big 1-D tensor too.
  const std::string v = str(Tensor::arange(5000));
  CHECK(has(v, "..."));
  CHECK(has(v, "4999."));
  CHECK_FALSE(has(v, "2500."));
}

// ---- in-place ops -----------------------------------------------------------------

TEST_CASE("fill_ overwrites every element, including through a shared view") {
  Tensor a = Tensor::zeros({3, 4});
  Tensor v = a.reshape({12});
  a.fill_(real(2.5));
  CHECK(v.to_vector() == std::vector<real>(12, real(2.5)));
  a.zero_();
  CHECK(v.to_vector() == std::vector<real>(12, 0));
  // Only the slice's rows are filled.
  a.slice0(1, 2).fill_(7);
  CHECK(a.to_vector() == std::vector<real>{0, 0, 0, 0, 7, 7, 7, 7, 0, 0, 0, 0});
}

TEST_CASE("fill_ of a tensor large enough to run in parallel fills all of it") {
  Tensor a = Tensor::empty({100003});
  a.fill_(3);
  CHECK(sum(a).item() == doctest::Approx(300009));
}

TEST_CASE("copy_ copies values (same count, any shape) and rejects a size mismatch") {
  Tensor dst = Tensor::zeros({2, 3});
  Tensor src = Tensor::arange(6);
  dst.copy_(src);
  CHECK(dst.to_vector() == src.to_vector());
  CHECK_FALSE(dst.shares_storage_with(src));
  src.at({0}) = 50;
  CHECK(dst.at({0, 0}) == 0);  // a copy, not an alias
  dst.copy_(dst);              // self copy is a no-op
  CHECK(dst.at({1, 2}) == 5);
  const std::string msg = error_of([&] { dst.copy_(Tensor::zeros({5})); });
  CHECK(has(msg, "copy_"));
  CHECK(has(msg, "(5)"));
  CHECK(has(msg, "(2,3)"));
}

TEST_CASE("add_ adds alpha * other in place and requires equal shapes") {
  Tensor a = Tensor::from_vector({1, 2, 3});
  a.add_(Tensor::from_vector({10, 20, 30}));
  CHECK(a.to_vector() == std::vector<real>{11, 22, 33});
  a.add_(Tensor::from_vector({1, 1, 1}), -2);
  CHECK(a.to_vector() == std::vector<real>{9, 20, 31});
  a.mul_(2);
  CHECK(a.to_vector() == std::vector<real>{18, 40, 62});
  const std::string msg = error_of([&] { a.add_(Tensor::zeros({1, 3})); });
  CHECK(has(msg, "add_"));
  CHECK(has(msg, "(3)"));
  CHECK(has(msg, "(1,3)"));
}
