// core matmul: 2-D values by hand, batched, broadcast batch dims, transpose
// flags against explicit transposed copies, and error messages.
#include <doctest/doctest.h>

#include "errors.h"
#include "test_seed.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/qkv_core.h"
#ifdef _OPENMP
#include <cblas.h>
#endif

using namespace qkv;

namespace {
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::test_generator;

// Naive (M,K) x (K,N) on raw row-major blocks, accumulated in double.
void naive_mm(const real* a, const real* b, real* c, int64_t M, int64_t K, int64_t N) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(a[i * K + k]) * b[k * N + j];
      c[i * N + j] = static_cast<real>(s);
    }
}
}  // namespace

TEST_CASE("2-D matmul matches the hand-computed product") {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor c = matmul(a, b);
  REQUIRE(c.shape() == Shape{2, 2});
  // [1*7+2*9+3*11, 1*8+2*10+3*12; 4*7+5*9+6*11, 4*8+5*10+6*12]
  CHECK(c.to_vector() == std::vector<real>{58, 64, 139, 154});
  Tensor d = matmul(b, a);  // (3,2) x (2,3)
  REQUIRE(d.shape() == Shape{3, 3});
  CHECK(d.to_vector() == std::vector<real>{39, 54, 69, 49, 68, 87, 59, 82, 105});
  // (1,3) x (3,1): a dot product.
  CHECK(matmul(Tensor::from_vector({1, 2, 3}, {1, 3}), Tensor::from_vector({4, 5, 6}, {3, 1}))
            .item() == 32);
}

TEST_CASE("batched (B,M,K) x (B,K,N) multiplies each pair of matrices") {
  Generator g = test_generator();
  const int64_t B = 3, M = 4, K = 5, N = 2;
  Tensor a = Tensor::normal({B, M, K}, 0, 1, g), b = Tensor::normal({B, K, N}, 0, 1, g);
  Tensor c = matmul(a, b);
  REQUIRE(c.shape() == Shape{B, M, N});
  Tensor ref = Tensor::empty({B, M, N});
  for (int64_t i = 0; i < B; ++i)
    naive_mm(a.data() + i * M * K, b.data() + i * K * N, ref.data() + i * M * N, M, K, N);
  CHECK(max_abs_diff(c, ref) < 1e-5);
  // Each batch equals the 2-D product of its slices.
  for (int64_t i = 0; i < B; ++i) {
    Tensor ci = matmul(a.slice0(i, i + 1).reshape({M, K}), b.slice0(i, i + 1).reshape({K, N}));
    CHECK(max_abs_diff(ci.reshape({1, M, N}), c.slice0(i, i + 1)) < 1e-6);
  }
}

TEST_CASE("batched (B,M,K) x (K,N): one weight for every batch element") {
  Generator g = test_generator();
  Tensor a = Tensor::normal({2, 3, 4, 5}, 0, 1, g), w = Tensor::normal({5, 6}, 0, 1, g);
  Tensor c = matmul(a, w);
  REQUIRE(c.shape() == Shape{2, 3, 4, 6});
  Tensor ref = Tensor::empty({24, 6});
  naive_mm(a.data(), w.data(), ref.data(), 24, 5, 6);
  CHECK(max_abs_diff(c.reshape({24, 6}), ref) < 1e-5);
  // (K,N) on the left: (M,K) x (B,K,N).
  Tensor l = Tensor::normal({4, 5}, 0, 1, g), r = Tensor::normal({3, 5, 2}, 0, 1, g);
  Tensor lr = matmul(l, r);
  REQUIRE(lr.shape() == Shape{3, 4, 2});
  for (int64_t i = 0; i < 3; ++i) {
    Tensor ref_i = Tensor::empty({4, 2});
    naive_mm(l.data(), r.data() + i * 10, ref_i.data(), 4, 5, 2);
    CHECK(max_abs_diff(lr.slice0(i, i + 1).reshape({4, 2}), ref_i) < 1e-5);
  }
}

TEST_CASE("leading dims broadcast: (2,1,M,K) x (3,K,N) -> (2,3,M,N)") {
  Generator g = test_generator();
  const int64_t M = 3, K = 4, N = 5;
  Tensor a = Tensor::normal({2, 1, M, K}, 0, 1, g), b = Tensor::normal({3, K, N}, 0, 1, g);
  Tensor c = matmul(a, b);
  REQUIRE(c.shape() == Shape{2, 3, M, N});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      Tensor ref = Tensor::empty({M, N});
      naive_mm(a.data() + i * M * K, b.data() + j * K * N, ref.data(), M, K, N);
      Tensor got = c.slice0(i, i + 1).reshape({3, M, N}).slice0(j, j + 1).reshape({M, N});
      INFO("batch " << i << "," << j);
      CHECK(max_abs_diff(got, ref) < 1e-5);
    }
  // And the mirror: (3,M,K) x (2,1,K,N).
  Tensor a2 = Tensor::normal({3, M, K}, 0, 1, g), b2 = Tensor::normal({2, 1, K, N}, 0, 1, g);
  Tensor c2 = matmul(a2, b2);
  REQUIRE(c2.shape() == Shape{2, 3, M, N});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      Tensor ref = Tensor::empty({M, N});
      naive_mm(a2.data() + j * M * K, b2.data() + i * K * N, ref.data(), M, K, N);
      Tensor got = c2.slice0(i, i + 1).reshape({3, M, N}).slice0(j, j + 1).reshape({M, N});
      CHECK(max_abs_diff(got, ref) < 1e-5);
    }
  // (1,M,K) x (B,K,N) and (B,M,K) x (1,K,N): a batch of 1 broadcasts whole.
  Tensor one = Tensor::normal({1, M, K}, 0, 1, g), many = Tensor::normal({4, K, N}, 0, 1, g);
  Tensor c3 = matmul(one, many);
  REQUIRE(c3.shape() == Shape{4, M, N});
  for (int64_t j = 0; j < 4; ++j) {
    Tensor ref = Tensor::empty({M, N});
    naive_mm(one.data(), many.data() + j * K * N, ref.data(), M, K, N);
    CHECK(max_abs_diff(c3.slice0(j, j + 1).reshape({M, N}), ref) < 1e-5);
  }
  Tensor c4 = matmul(Tensor::normal({4, M, K}, 0, 1, g), Tensor::normal({1, K, N}, 0, 1, g));
  CHECK(c4.shape() == Shape{4, M, N});
}

TEST_CASE("every transpose flag combination equals matmul of explicit transpose() copies") {
  Generator g = test_generator();
  // Shapes with batch dims that broadcast, so every path is exercised.
  struct Case {
    Shape a, b;  // a: (..., M, K) before transposing; b: (..., K, N)
  };
  const std::vector<Case> cases = {{{3, 4}, {4, 5}},
                                   {{2, 3, 4}, {2, 4, 5}},
                                   {{2, 1, 3, 4}, {3, 4, 5}},
                                   {{2, 3, 4}, {4, 5}},
                                   {{3, 4}, {2, 4, 5}}};
  for (const Case& cs : cases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        INFO(to_string(cs.a) << " x " << to_string(cs.b) << " ta=" << ta << " tb=" << tb);
        // x, y are stored as the flags say: x is (..., K, M) when ta, y is (..., N, K) when tb.
        Tensor a = Tensor::normal(cs.a, 0, 1, g), b = Tensor::normal(cs.b, 0, 1, g);
        Tensor x = ta ? transpose(a, -1, -2) : a;
        Tensor y = tb ? transpose(b, -1, -2) : b;
        Tensor got = matmul(x, y, ta, tb);
        // The reference transposes explicitly (a copy) and multiplies without flags.
        Tensor want = matmul(ta ? transpose(x, -1, -2) : x, tb ? transpose(y, -1, -2) : y);
        REQUIRE(got.shape() == want.shape());
        CHECK(max_abs_diff(got, want) < 1e-5);
        CHECK(max_abs_diff(got, matmul(a, b)) < 1e-5);
      }
}

TEST_CASE("a big batched product (each product cut across the threads) matches the naive product") {
  Generator g = test_generator();
  const int64_t B = 2, M = 130, K = 120, N = 140;  // 2MNK > 2^21: gemm cuts each product
  Tensor a = Tensor::uniform({B, M, K}, -1, 1, g), b = Tensor::uniform({B, N, K}, -1, 1, g);
  Tensor c = matmul(a, b, false, true);
  Tensor bt = transpose(b, 1, 2);
  Tensor ref = Tensor::empty({B, M, N});
  for (int64_t i = 0; i < B; ++i)
    naive_mm(a.data() + i * M * K, bt.data() + i * K * N, ref.data() + i * M * N, M, K, N);
  CHECK(max_abs_diff(c, ref) < 1e-4);
}

TEST_CASE("an inner dim of 0 gives zeros; an empty batch gives an empty result") {
  Tensor c = matmul(Tensor::ones({2, 0}), Tensor::ones({0, 3}));
  REQUIRE(c.shape() == Shape{2, 3});
  CHECK(c.to_vector() == std::vector<real>(6, 0));
  Tensor d = matmul(Tensor::ones({4, 2, 0}), Tensor::ones({4, 0, 3}));
  CHECK(d.to_vector() == std::vector<real>(24, 0));
  CHECK(matmul(Tensor::ones({0, 2, 3}), Tensor::ones({3, 4})).shape() == Shape{0, 2, 4});
}

TEST_CASE("inner-dim mismatch: matmul: (2,3) x (4,5): inner dims 3 != 4") {
  const std::string msg = error_of([] { matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})); });
  CHECK(msg == "matmul: (2,3) x (4,5): inner dims 3 != 4");
  // With flags the message marks the transposed operand.
  const std::string t = error_of([] {
    matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}), true, false);
  });
  CHECK(has(t, "matmul: (2,3)^T x (4,5): inner dims 2 != 4"));
}

TEST_CASE("rank-1 operands and non-broadcasting batch dims are errors naming matmul") {
  std::string msg = error_of([] { matmul(Tensor::zeros({3}), Tensor::zeros({3, 2})); });
  CHECK(has(msg, "matmul"));
  CHECK(has(msg, "(3)"));
  CHECK(has(msg, "rank >= 2"));
  msg = error_of([] { matmul(Tensor::zeros({2, 3}), Tensor::zeros({3})); });
  CHECK(has(msg, "rank >= 2"));
  msg = error_of([] { matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 4})); });
  CHECK(has(msg, "matmul"));
  CHECK(has(msg, "(2)"));
  CHECK(has(msg, "(3)"));
  CHECK(has(error_of([] { matmul(Tensor(), Tensor::zeros({2, 2})); }), "matmul"));
}

TEST_CASE("gemm with beta accumulates into C and counts flops") {
  const real A[] = {1, 2, 3, 4};  // (2,2)
  const real B[] = {1, 0, 0, 1};  // identity
  real C[] = {10, 10, 10, 10};
  const int64_t before = gemm_flop_count();
  gemm(false, false, 2, 2, 2, 2, A, 2, B, 2, 1, C, 2);  // C = 2 A I + C
  CHECK(std::vector<real>(C, C + 4) == std::vector<real>{12, 14, 16, 18});
  CHECK(gemm_flop_count() - before == 16);
  gemm(true, false, 2, 2, 2, 1, A, 2, B, 2, 0, C, 2);  // C = A^T
  CHECK(std::vector<real>(C, C + 4) == std::vector<real>{1, 3, 2, 4});
}

// With 2 threads a big gemm is cut into one single-threaded sgemm per thread,
// along M, N or K (whichever packs the least twice). Each shape below takes a
// different cut; every transpose flag, a leading dimension wider than the
// matrix and beta != 0 are checked against a double-precision reference.
TEST_CASE(
    "gemm split across 2 threads (along M, N or K) matches the naive product for every flag") {
  const int prev = get_num_threads();
  set_num_threads(2);
  Generator g = test_generator();
  struct Case {
    int64_t M, N, K;
    const char* cut;
  };
  const Case cases[] = {
      {1000, 48, 80, "M"}, {40, 1000, 96, "N"}, {48, 40, 3000, "K"}, {333, 129, 517, "odd sizes"}};
  for (const Case& c : cases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const std::string cut = c.cut;
        CAPTURE(cut);
        CAPTURE(ta);
        CAPTURE(tb);
        const int64_t pad = 3;  // leading dimensions wider than the rows they hold
        const int64_t a_rows = ta ? c.K : c.M, a_cols = ta ? c.M : c.K;
        const int64_t b_rows = tb ? c.N : c.K, b_cols = tb ? c.K : c.N;
        const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = c.N + pad;
        Tensor A = Tensor::uniform({a_rows, lda}, -1, 1, g),
               B = Tensor::uniform({b_rows, ldb}, -1, 1, g);
        Tensor C = Tensor::uniform({c.M, ldc}, -1, 1, g);
        const Tensor C0 = C.clone();
        const real alpha = 0.5, beta = 2;
        gemm(ta, tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
        double worst = 0;
        for (int64_t i = 0; i < c.M; ++i)
          for (int64_t j = 0; j < c.N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < c.K; ++k) {
              const double a = ta ? A.data()[k * lda + i] : A.data()[i * lda + k];
              const double b = tb ? B.data()[j * ldb + k] : B.data()[k * ldb + j];
              s += a * b;
            }
            const double want = alpha * s + beta * double(C0.data()[i * ldc + j]);
            worst = std::max(worst, std::fabs(want - C.data()[i * ldc + j]));
          }
        CHECK(worst < 2e-3);  // float32 sums of up to 3000 products of [-1, 1] values
        // The padding columns of C are left alone.
        bool pad_kept = true;
        for (int64_t i = 0; i < c.M; ++i)
          for (int64_t j = c.N; j < ldc; ++j)
            pad_kept &= C.data()[i * ldc + j] == C0.data()[i * ldc + j];
        CHECK(pad_kept);
      }
  set_num_threads(prev);
}

// beta = 0 means C is written, never read: gemm zeroes C itself and asks
// OpenBLAS for C += A B. NaN already in C must not reach the result, and the
// padding columns of a strided C stay as they were; on one thread and on the
// 2-thread split paths.
TEST_CASE("gemm with beta = 0 ignores NaN already in C and leaves its padding alone") {
  const int prev = get_num_threads();
  Generator g = test_generator();
  struct Case {
    int64_t M, N, K;
  };
  const Case cases[] = {
      {32, 32, 32}, {1000, 48, 80}, {40, 1000, 96}, {48, 40, 3000}};  // one, M, N, K cut
  for (int threads : {1, 2})
    for (const Case& c : cases)
      for (int64_t pad : {0, 5}) {
        set_num_threads(threads);
        CAPTURE(threads);
        CAPTURE(c.M);
        CAPTURE(pad);
        const int64_t ldc = c.N + pad;
        Tensor A = Tensor::uniform({c.M, c.K}, -1, 1, g), B = Tensor::uniform({c.K, c.N}, -1, 1, g);
        Tensor C = Tensor::full({c.M, ldc}, std::nanf(""));
        for (int64_t i = 0; i < c.M; ++i)
          for (int64_t j = c.N; j < ldc; ++j) C.data()[i * ldc + j] = 7;
        gemm(false, false, c.M, c.N, c.K, 1, A.data(), c.K, B.data(), c.N, 0, C.data(), ldc);
        Tensor want = Tensor::empty({c.M, c.N});
        naive_mm(A.data(), B.data(), want.data(), c.M, c.K, c.N);
        double worst = 0;
        bool pad_kept = true, finite = true;
        for (int64_t i = 0; i < c.M; ++i) {
          for (int64_t j = 0; j < c.N; ++j) {
            finite &= std::isfinite(C.data()[i * ldc + j]);
            worst = std::max(worst,
                             std::fabs(double(want.data()[i * c.N + j]) - C.data()[i * ldc + j]));
          }
          for (int64_t j = c.N; j < ldc; ++j) pad_kept &= C.data()[i * ldc + j] == 7;
        }
        CHECK(finite);
        CHECK(worst < 2e-3);
        CHECK(pad_kept);
      }
  set_num_threads(prev);
}

// While the team is benched (a competing load, core/parallel.h) the parts of a
// split product run in turn on the calling thread: the same parts, so the
// same bits, whichever cut the shape takes.
TEST_CASE("a split gemm gives bitwise the same result on a team and on a benched team") {
  const int prev = get_num_threads();
  set_num_threads(2);
  Generator g = test_generator();
  struct Case {
    int64_t M, N, K;
  };
  for (const Case& c : {Case{1000, 48, 80}, Case{40, 1000, 96}, Case{48, 40, 3000}}) {
    CAPTURE(c.M);
    const Tensor A = Tensor::uniform({c.M, c.K}, -1, 1, g),
                 B = Tensor::uniform({c.K, c.N}, -1, 1, g);
    Tensor team = Tensor::zeros({c.M, c.N}), alone = Tensor::zeros({c.M, c.N});
    set_num_threads(2);  // a fresh policy
    CHECK(plan_team().team);
    gemm(false, false, c.M, c.N, c.K, 1, A.data(), c.K, B.data(), c.N, 0, team.data(), c.N);
    // A 100 ms stall (a whole window), with a bench of 1000 s: longer than any
    // slow machine takes here.
    TeamPolicy::Params p;
    p.solo_min_ns = p.solo_max_ns = int64_t{1'000'000'000} * 1000;
    qkv::detail::calling_thread_policy() = TeamPolicy(p);
    qkv::detail::calling_thread_policy().record(10'000, 1'000,
                                                qkv::detail::now_ns());  // cold: not judged
    qkv::detail::calling_thread_policy().record(10'000, 100'000'000, qkv::detail::now_ns());
    CHECK_FALSE(plan_team().team);
    gemm(false, false, c.M, c.N, c.K, 1, A.data(), c.K, B.data(), c.N, 0, alone.data(), c.N);
    bool same = true;
    for (int64_t i = 0; i < c.M * c.N; ++i) same = same && team.data()[i] == alone.data()[i];
    CHECK(same);
  }
  set_num_threads(prev);
}

#ifdef _OPENMP
// sgemm never threads itself (qkv cuts products, core/blas.cpp): outside a
// region OpenBLAS is called with OpenMP's default at 1, and the caller's
// default is back afterwards, for the caller's own parallel regions.
TEST_CASE(
    "gemm calls sgemm single-threaded and leaves the caller's OpenMP thread count as it was") {
  const int prev = get_num_threads();
  set_num_threads(2);
  CHECK(openblas_get_num_threads() == 1);
  openblas_set_num_threads(2);  // as a user's code might: gemm puts it back
  Generator g = test_generator();
  // 60 x 60 x 250: too narrow for qkv to cut, big enough for OpenBLAS to thread.
  const Tensor A = Tensor::uniform({60, 250}, -1, 1, g), B = Tensor::uniform({250, 60}, -1, 1, g);
  Tensor C = Tensor::zeros({60, 60});
  gemm(false, false, 60, 60, 250, 1, A.data(), 250, B.data(), 60, 0, C.data(), 60);
  CHECK(openblas_get_num_threads() == 1);
  CHECK(omp_get_max_threads() == 2);
  int team = 0;
#pragma omp parallel
  {
#pragma omp single
    team = omp_get_num_threads();
  }
  CHECK(team == 2);
  set_num_threads(prev);
}
#endif
