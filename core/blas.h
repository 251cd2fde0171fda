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

// The precision of the products gemm() and gemm_batched() compute, for the
// whole process (like torch.set_float32_matmul_precision, and like
// set_num_threads: a setting of the machine's work, not of a model).
//   fp32 (the default): float32 operands, float32 accumulation (sgemm).
//   bf16: each product rounds its float32 operands to bfloat16 as it reads
//     them (nearest, ties to even) and accumulates in float32; the operands in
//     memory, C, and everything outside products stay float32. On a CPU with
//     AVX512-BF16 a vdpbf16ps kernel runs it, elsewhere an exact emulation
//     (core/gemm_bf16.h); bf16_products_native() says which.
// One process-wide setting rather than a per-thread one: a big product is cut
// across OpenMP threads (gemm_split), and every part must round alike. The
// float64 build (gradient checks) refuses bf16. docs/precision.md.
enum class MatmulPrecision { fp32, bf16 };
void set_matmul_precision(MatmulPrecision p);
MatmulPrecision matmul_precision();
const char* precision_name(MatmulPrecision p);  // "fp32", "bf16"
// True when bf16 products run on the CPU's vdpbf16ps, false when emulated.
bool bf16_products_native();

// Sets the precision for a scope and restores the previous one after it.
class MatmulPrecisionScope {
 public:
  explicit MatmulPrecisionScope(MatmulPrecision p) : prev_(matmul_precision()) {
    set_matmul_precision(p);
  }
  ~MatmulPrecisionScope() { set_matmul_precision(prev_); }
  MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
  MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;

 private:
  MatmulPrecision prev_;
};

// sgemm itself runs single-threaded, always: qkv cuts big products across its
// threads (gemm above), and OpenBLAS never starts a team of its own.
void blas_single_threaded();

// Floating-point operations done by gemm since start (2*M*N*K per product).
// Benchmarks read it to report achieved GFLOP/s.
int64_t gemm_flop_count();

}  // namespace qkv
