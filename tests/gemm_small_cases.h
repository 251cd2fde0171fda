// Small products (core/blas.cpp's gemm_small: libxsmm's generated kernels,
// with B^T copied out for the NT flags and a scratch block for alpha != 1 or
// beta not 0 or 1) against a naive product in double, for every flag pair,
// alpha and beta, with leading dimensions wider than the rows. Included by
// tests/test_gemm_small.cpp (float32) and tests/test_gemm_small_grad.cpp (the
// float64 build, where the kernels are libxsmm's double ones).
#include <doctest/doctest.h>

#include "test_seed.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/qkv_core.h"

TEST_CASE("small products (the per-head shapes) equal the naive product for every flag") {
  using namespace qkv;
  Generator g = qkv::testing::test_generator();
  struct Case {
    int64_t M, N, K;
  };
  // tiny's, small's and gpt's per-head shapes, odd sizes, a row, a column,
  // the largest dimension taken, and one past the size limit (sgemm)
  const Case cases[] = {{12, 12, 16}, {12, 16, 12}, {32, 32, 32}, {64, 64, 32}, {64, 32, 64},
                        {1, 37, 5},   {29, 1, 7},   {13, 17, 3},  {128, 16, 8}, {65, 64, 64}};
  const real nan = std::numeric_limits<real>::quiet_NaN();
  for (const Case& c : cases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (real alpha : {real(1), real(0.5)})
          for (real beta : {real(0), real(1), real(2)}) {
            CAPTURE(c.M);
            CAPTURE(c.N);
            CAPTURE(c.K);
            CAPTURE(ta);
            CAPTURE(tb);
            CAPTURE(alpha);
            CAPTURE(beta);
            const int64_t pad = 3;
            const int64_t a_rows = ta ? c.K : c.M, a_cols = ta ? c.M : c.K;
            const int64_t b_rows = tb ? c.N : c.K, b_cols = tb ? c.K : c.N;
            const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = c.N + pad;
            Tensor A = Tensor::uniform({a_rows, lda}, -1, 1, g),
                   B = Tensor::uniform({b_rows, ldb}, -1, 1, g);
            Tensor C = Tensor::uniform({c.M, ldc}, -1, 1, g);
            if (beta == 0)  // beta = 0: C is written, never read
              for (int64_t i = 0; i < c.M; ++i)
                for (int64_t j = 0; j < c.N; ++j) C.data()[i * ldc + j] = nan;
            const Tensor C0 = C.clone();
            gemm(ta, tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
            double worst = 0;
            bool finite = true, pad_kept = true;
            for (int64_t i = 0; i < c.M; ++i) {
              for (int64_t j = 0; j < c.N; ++j) {
                double s = 0;
                for (int64_t k = 0; k < c.K; ++k) {
                  const double a = ta ? A.data()[k * lda + i] : A.data()[i * lda + k];
                  const double b = tb ? B.data()[j * ldb + k] : B.data()[k * ldb + j];
                  s += a * b;
                }
                const double want =
                    alpha * s + (beta == 0 ? 0.0 : beta * double(C0.data()[i * ldc + j]));
                finite &= std::isfinite(C.data()[i * ldc + j]);
                worst = std::max(worst, std::fabs(want - C.data()[i * ldc + j]));
              }
              for (int64_t j = c.N; j < ldc; ++j)
                pad_kept &= C.data()[i * ldc + j] == C0.data()[i * ldc + j];
            }
            CHECK(finite);
            // sums of at most 64 products of numbers in [-1, 1]
            CHECK(worst < (sizeof(real) == 4 ? 1e-4 : 1e-12));
            CHECK(pad_kept);
          }
}
