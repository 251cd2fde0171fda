#include "core/blas.h"

#include <atomic>

#include <cblas.h>

#include "core/parallel.h"

namespace qkv {
namespace {
std::atomic<int64_t> g_flops{0};

inline void gemm_one(bool transA, bool transB, int64_t M, int64_t N, int64_t K, real alpha,
                     const real* A, int64_t lda, const real* B, int64_t ldb, real beta, real* C,
                     int64_t ldc) {
#ifdef QKV_DOUBLE
  cblas_dgemm(
#else
  cblas_sgemm(
#endif
      CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
      static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
      static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}
}  // namespace

void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, real alpha, const real* A,
          int64_t lda, const real* B, int64_t ldb, real beta, real* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  g_flops += 2 * M * N * K;
  if (K == 0) {  // BLAS leaves C untouched when K == 0 only if beta == 1
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];
    return;
  }
  gemm_one(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_batched(bool transA, bool transB, int64_t batch, int64_t M, int64_t N, int64_t K,
                  real alpha, const real* A, int64_t strideA, int64_t lda, const real* B,
                  int64_t strideB, int64_t ldb, real beta, real* C, int64_t strideC, int64_t ldc) {
  if (batch <= 0 || M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t b = 0; b < batch; ++b)
      gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C + b * strideC, ldc);
    return;
  }
  g_flops += 2 * M * N * K * batch;
  // Below ~2^21 flops per product BLAS threading does not pay; hand whole
  // products to threads instead (OpenBLAS runs single-threaded inside them).
  const bool per_thread = batch > 1 && 2 * M * N * K < (int64_t{1} << 21);
  if (per_thread) {
    parallel_for(
        batch,
        [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b)
            gemm_one(transA, transB, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb,
                     beta, C + b * strideC, ldc);
        },
        /*grain=*/2);
  } else {
    for (int64_t b = 0; b < batch; ++b)
      gemm_one(transA, transB, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta,
               C + b * strideC, ldc);
  }
}

void blas_set_num_threads(int n) { openblas_set_num_threads(n); }

int64_t gemm_flop_count() { return g_flops.load(); }

}  // namespace qkv
