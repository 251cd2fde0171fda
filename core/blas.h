// The BLAS boundary. Every matrix product in qkv goes through gemm(), which
// calls OpenBLAS sgemm (dgemm in the float64 build), row-major, using the
// transpose flags instead of copying. Small products (every dimension <= 128
// and M*N*K <= 64^3: attention's per-head products) go to a kernel libxsmm
// generates for the shape instead, which skips sgemm's packing (gemm_small in
// blas.cpp). With 2+ threads a big product is cut into one single-threaded
// sgemm per thread (see gemm_split in blas.cpp); OpenBLAS never threads a
// product itself.
#pragma once
#include <cstdint>

#include "core/real.h"

namespace qkv {

// C (M,N) = alpha * op(A) (M,K) * op(B) (K,N) + beta * C, all row-major.
// op(A) = A^T when transA (then A is stored (K,M)); likewise for B.
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, real alpha, const real* A,
          int64_t lda, const real* B, int64_t ldb, real beta, real* C, int64_t ldc);

// `batch` independent products; matrix i of A starts at A + i * strideA (stride 0
// broadcasts one matrix to every product), likewise B and C. Small products are
// spread over threads one whole gemm each; big ones are each cut across the
// threads as gemm() cuts one.
void gemm_batched(bool transA, bool transB, int64_t batch, int64_t M, int64_t N, int64_t K,
                  real alpha, const real* A, int64_t strideA, int64_t lda, const real* B,
                  int64_t strideB, int64_t ldb, real beta, real* C, int64_t strideC, int64_t ldc);

// sgemm itself runs single-threaded, always: qkv cuts big products across its
// threads (gemm above), and OpenBLAS never starts a team of its own.
void blas_single_threaded();

// Floating-point operations done by gemm since start (2*M*N*K per product).
// Benchmarks read it to report achieved GFLOP/s.
int64_t gemm_flop_count();

}  // namespace qkv
