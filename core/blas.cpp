#include "core/blas.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include <cblas.h>
#include <libxsmm.h>

#include "core/error.h"
#include "core/gemm_bf16.h"
#include "core/parallel.h"
#include "core/tensor.h"

namespace qkv {
namespace {
// The flop count, one cache line per OpenMP thread number: attention calls
// gemm() per head from both threads, and one shared counter bounced its line
// between the cores on every call.
constexpr int kFlopSlots = 64;
struct alignas(64) FlopSlot {
  std::atomic<int64_t> n{0};
};
FlopSlot g_flops[kFlopSlots];
inline void count_flops(int64_t n) {
#ifdef _OPENMP
  const int slot = omp_get_thread_num() % kFlopSlots;
#else
  const int slot = 0;
#endif
  g_flops[slot].n.fetch_add(n, std::memory_order_relaxed);
}

// OpenBLAS's OpenMP build threads a product itself when it is called outside
// an active OpenMP region: a team that qkv cannot time, nor bench when another
// process holds a core (under such a load one of its 1.5 MFLOP products was
// measured at 17 ms instead of 20 us). So sgemm is always single-threaded, and
// products big enough to share are cut by gemm_split below. OpenBLAS 0.3.21
// threads when its own count is above 1 and raises that count to OpenMP's
// default (omp_get_max_threads) when the default is higher; so its count is
// kept at 1, and outside a region the calling thread's default is 1 for the
// call and restored after it, for the caller's own parallel regions.
class OneBlasThread {
 public:
  OneBlasThread() {
#ifdef _OPENMP
    if (omp_in_parallel()) return;
    if ((prev_ = omp_get_max_threads()) > 1) omp_set_num_threads(1);
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);  // someone raised it
#endif
  }
  ~OneBlasThread() {
#ifdef _OPENMP
    if (prev_ > 1) omp_set_num_threads(prev_);
#endif
  }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  int prev_ = 0;
};

// OpenBLAS meets beta == 0 with its own pass that zeroes C before the
// product (sgemm_beta). Measured here at 1 thread, that pass is slower than
// zeroing C with memset and asking for C += A B (beta = 1): 0.3 us of a 1.4 us
// 32x32x32 product, 20-28% on products with K = 32, 3-6% on the step's
// projections. The result is the same: 0 + x is x, and C is never read.
// ---- small products: libxsmm ---------------------------------------------------------
// OpenBLAS packs both operands into its own layout on every call. On the
// per-head attention products (T, S = 12..64, d_k = 16..32) the packing and
// the call cost more than the arithmetic: measured on an AVX2 EPYC, a
// 12x16x12 product took 0.34 us in sgemm and 0.12 us in libxsmm, a 64x32x64
// one 6.4 us and 2.9 us. libxsmm (Debian's libxsmm-dev) generates a kernel
// for each shape at run time, for the CPU it runs on (AVX2 or AVX-512), that
// reads the operands where they are. Its kernels compute the column-major
// C = A B or A B^T with alpha 1 and beta 0 or 1; a row-major product is the
// column-major C^T = op(B)^T op(A)^T, so
//   row-major NN -> column-major NN, with B as the first operand;
//   row-major TN -> column-major NT;
//   row-major NT -> column-major TN, which has no kernel: B^T (K,N) is
//                   copied out first and the product is NN;
//   row-major TT -> sgemm (no product of qkv's is TT).
// alpha not 1 or beta not 0 or 1: the product goes to a scratch block, then
// C = alpha * block + beta * C. A shape with no kernel goes to sgemm.
constexpr int64_t kSmallDim = 128;           // every dimension at most this
constexpr int64_t kSmallMNK = 64 * 64 * 64;  // and M*N*K at most this

#ifdef QKV_DOUBLE
using SmallKernel = libxsmm_dmmfunction;
#define QKV_XSMM_DISPATCH libxsmm_dmmdispatch
#else
using SmallKernel = libxsmm_smmfunction;
#define QKV_XSMM_DISPATCH libxsmm_smmdispatch
#endif

bool gemm_small(bool transA, bool transB, int64_t M, int64_t N, int64_t K, real alpha,
                const real* A, int64_t lda, const real* B, int64_t ldb, real beta, real* C,
                int64_t ldc) {
  if ((transA && transB) || M > kSmallDim || N > kSmallDim || K > kSmallDim ||
      M * N * K > kSmallMNK)
    return false;
  alignas(64) thread_local real scratch[2 * kSmallDim * kSmallDim];
  const bool direct = alpha == 1 && (beta == 0 || beta == 1);
  const libxsmm_blasint m = static_cast<libxsmm_blasint>(N), n = static_cast<libxsmm_blasint>(M),
                        k = static_cast<libxsmm_blasint>(K);
  const libxsmm_blasint la = static_cast<libxsmm_blasint>(transB ? N : ldb),
                        lb = static_cast<libxsmm_blasint>(lda),
                        lc = static_cast<libxsmm_blasint>(direct ? ldc : N);
  const real one = 1, kernel_beta = direct ? beta : 0;
  const int flags = transA ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
  const int prefetch = LIBXSMM_PREFETCH_NONE;
  const SmallKernel kernel =
      QKV_XSMM_DISPATCH(m, n, k, &la, &lb, &lc, &one, &kernel_beta, &flags, &prefetch);
  if (!kernel) return false;
  const real* first = B;
  if (transB) {  // B is stored (N,K): B^T (K,N) copied out by libxsmm's transpose
    // (column-major: B is a (K,N) block with leading dimension ldb, its
    // transpose an (N,K) one with N; 2-4x faster here than a plain loop)
    libxsmm_otrans(scratch, B, sizeof(real), k, m, static_cast<libxsmm_blasint>(ldb), m);
    first = scratch;
  }
  if (direct) {
    kernel(first, A, C);
    return true;
  }
  real* __restrict prod = scratch + kSmallDim * kSmallDim;  // (M,N)
  kernel(first, A, prod);
  for (int64_t i = 0; i < M; ++i) {
    real* __restrict c = C + i * ldc;
    const real* __restrict r = prod + i * N;
    if (beta == 0)
      for (int64_t j = 0; j < N; ++j) c[j] = alpha * r[j];
    else
      for (int64_t j = 0; j < N; ++j) c[j] = alpha * r[j] + beta * c[j];
  }
  return true;
}
#undef QKV_XSMM_DISPATCH

std::atomic<MatmulPrecision> g_precision{MatmulPrecision::fp32};

inline void gemm_one_fp32(bool transA, bool transB, int64_t M, int64_t N, int64_t K, real alpha,
                          const real* A, int64_t lda, const real* B, int64_t ldb, real beta,
                          real* C, int64_t ldc) {
  if (gemm_small(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
  if (beta == 0) {
    if (ldc == N)
      std::memset(C, 0, sizeof(real) * static_cast<size_t>(M * N));
    else
      for (int64_t i = 0; i < M; ++i)
        std::memset(C + i * ldc, 0, sizeof(real) * static_cast<size_t>(N));
    beta = 1;
  }
  const OneBlasThread one;
#ifdef QKV_DOUBLE
  cblas_dgemm(
#else
  cblas_sgemm(
#endif
      CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
      static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
      static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}
// One product on the calling thread, in the precision set.
inline void gemm_one(bool transA, bool transB, int64_t M, int64_t N, int64_t K, real alpha,
                     const real* A, int64_t lda, const real* B, int64_t ldb, real beta, real* C,
                     int64_t ldc) {
#ifndef QKV_DOUBLE
  if (g_precision.load(std::memory_order_relaxed) == MatmulPrecision::bf16) {
    if (bf16_native_available())
      gemm_bf16_native(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
      gemm_bf16_emulated(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#endif
  gemm_one_fp32(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// ---- one product on several threads ----------------------------------------------
// OpenBLAS's own threading shares packed panels between its threads and
// synchronises on them; on the step's shapes here it gained only 1.3-1.6x from
// a second core. Instead each thread runs an independent single-threaded sgemm
// on its part of the product, cut where the least data is packed twice:
//   split M: rows of C and A; every thread packs all of B   (K*N extra per thread)
//   split N: columns of C and B; every thread packs all of A (M*K extra)
//   split K: each thread sums its share of K into its own (M,N) block, then the
//            blocks are added (about 2*M*N extra); for weight gradients, where
//            K is the (large) number of rows and M*N the (small) weight.
// The parts run on a team, or in turn on the calling thread while the team is
// benched (core/parallel.h): the same parts either way, so the same result.
// Products below kSplitFlops, and shapes too narrow to cut, are one sgemm call.
constexpr int64_t kSplitFlops = int64_t{1} << 20;

// [begin, end) of part t of n parts over [0, len), cut at multiples of `align`.
inline void part(int64_t len, int t, int n, int64_t align, int64_t& b, int64_t& e) {
  auto cut = [&](int i) { return std::min(len, (len * i / n + align / 2) / align * align); };
  b = t == 0 ? 0 : cut(t);
  e = t == n - 1 ? len : cut(t + 1);
}

bool gemm_split(bool transA, bool transB, int64_t M, int64_t N, int64_t K, real alpha,
                const real* A, int64_t lda, const real* B, int64_t ldb, real beta, real* C,
                int64_t ldc) {
  if (2 * M * N * K < kSplitFlops) return false;
  const TeamPlan plan = plan_team();
  const int nt = plan.parts;
  if (nt < 2) return false;
  const double dup_m = double(K) * N, dup_n = double(M) * K, dup_k = 2.0 * M * N;
  const bool can_m = M >= 32 * nt, can_n = N >= 32 * nt, can_k = K >= 128 * nt;
  enum { kM, kN, kK, kNone } how = kNone;
  double best = 0;
  if (can_m && (how == kNone || dup_m < best)) how = kM, best = dup_m;
  if (can_n && (how == kNone || dup_n < best)) how = kN, best = dup_n;
  if (can_k && (how == kNone || dup_k < best)) how = kK, best = dup_k;
  if (how == kNone) return false;

  if (how == kM) {
    run_parts(
        plan,
        [&](int t, int n) {  // (M,K) rows of A: A + b*lda, or columns of the stored (K,M): A + b
          int64_t b, e;
          part(M, t, n, 16, b, e);
          if (b < e)
            gemm_one(transA, transB, e - b, N, K, alpha, transA ? A + b : A + b * lda, lda, B, ldb,
                     beta, C + b * ldc, ldc);
        });
  } else if (how == kN) {
    run_parts(
        plan,
        [&](int t, int n) {  // (K,N) columns of B: B + b, or rows of the stored (N,K): B + b*ldb
          int64_t b, e;
          part(N, t, n, 16, b, e);
          if (b < e)
            gemm_one(transA, transB, M, e - b, K, alpha, A, lda, transB ? B + b * ldb : B + b, ldb,
                     beta, C + b, ldc);
        });
  } else {
    // Split K: part t > 0 goes into its own (M,N) block of `partial`, then C
    // += the blocks, rows shared out again, parts added in order. Two
    // regions rather than one with a barrier, so that the policy times each.
    Tensor partial = Tensor::empty({int64_t(nt - 1), M, N});
    run_parts(plan, [&](int t, int n) {
      int64_t b, e;
      part(K, t, n, 16, b, e);
      const real* Ak = transA ? A + b * lda : A + b;  // columns b..e of op(A) (M,K)
      const real* Bk = transB ? B + b : B + b * ldb;  // rows b..e of op(B) (K,N)
      if (t == 0)
        gemm_one(transA, transB, M, N, e - b, alpha, Ak, lda, Bk, ldb, beta, C, ldc);
      else
        gemm_one(transA, transB, M, N, e - b, alpha, Ak, lda, Bk, ldb, 0,
                 partial.data() + (t - 1) * M * N, N);
    });
    run_parts(plan_team(), [&](int t, int n) {
      int64_t b, e;
      part(M, t, n, 1, b, e);
      for (int p = 1; p < nt; ++p) {
        const real* __restrict src = partial.data() + (p - 1) * M * N;
        for (int64_t i = b; i < e; ++i) {
          real* __restrict c = C + i * ldc;
          const real* __restrict r = src + i * N;
#pragma omp simd
          for (int64_t j = 0; j < N; ++j) c[j] += r[j];
        }
      }
    });
  }
  return true;
}

// One product on the calling thread's share of the machine: cut across the
// threads when that pays, else one sgemm call.
void gemm_any(bool transA, bool transB, int64_t M, int64_t N, int64_t K, real alpha, const real* A,
              int64_t lda, const real* B, int64_t ldb, real beta, real* C, int64_t ldc) {
  if (!gemm_split(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
    gemm_one(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
}  // namespace

#ifndef QKV_DOUBLE
namespace {
// The stored (rows, cols) block at X (leading dimension ld) rounded to
// bfloat16 into out (rows, cols), compact. Branch-free, so it vectorises.
void round_block(const float* X, int64_t ld, int64_t rows, int64_t cols, float* out) {
  for (int64_t i = 0; i < rows; ++i) {
    const uint32_t* __restrict x = reinterpret_cast<const uint32_t*>(X + i * ld);
    uint32_t* __restrict o = reinterpret_cast<uint32_t*>(out + i * cols);
    for (int64_t j = 0; j < cols; ++j) {  // bf16_bits (core/gemm_bf16.h), kept as float bits
      const uint32_t u = x[j];
      const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
      const uint32_t nan = (u | 0x00400000u) & 0xFFFF0000u;
      const uint32_t zero = u & 0x80000000u;
      o[j] = (u & 0x7F800000u) == 0 ? zero : (u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded;
    }
  }
}
}  // namespace

void gemm_bf16_emulated(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
                        const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                        float* C, int64_t ldc) {
  // op(A) and op(B) rounded, in their stored layout: A is (M,K) or, when
  // transA, (K,M); B is (K,N) or (N,K). Scratch grown once per thread.
  thread_local std::vector<float> ra, rb;
  const int64_t ar = transA ? K : M, ac = transA ? M : K;
  const int64_t br = transB ? N : K, bc = transB ? K : N;
  ra.resize(static_cast<size_t>(ar * ac));
  rb.resize(static_cast<size_t>(br * bc));
  round_block(A, lda, ar, ac, ra.data());
  round_block(B, ldb, br, bc, rb.data());
  gemm_one_fp32(transA, transB, M, N, K, alpha, ra.data(), ac, rb.data(), bc, beta, C, ldc);
}
#endif

void set_matmul_precision(MatmulPrecision p) {
#ifdef QKV_DOUBLE
  if (p != MatmulPrecision::fp32)
    throw Error(std::string("set_matmul_precision: ") + precision_name(p) +
                " products need the float32 build (this is the float64 one, for gradient "
                "checks)");
#endif
  g_precision.store(p, std::memory_order_relaxed);
}
MatmulPrecision matmul_precision() { return g_precision.load(std::memory_order_relaxed); }
const char* precision_name(MatmulPrecision p) {
  return p == MatmulPrecision::bf16 ? "bf16" : "fp32";
}
bool bf16_products_native() { return bf16_native_available(); }

void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, real alpha, const real* A,
          int64_t lda, const real* B, int64_t ldb, real beta, real* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  count_flops(2 * M * N * K);
  if (K == 0) {  // BLAS leaves C untouched when K == 0 only if beta == 1
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];
    return;
  }
  gemm_any(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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
  count_flops(2 * M * N * K * batch);
  // Below ~2^21 flops per product cutting one product does not pay; hand
  // whole products to threads instead (OpenBLAS runs single-threaded inside them).
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
      gemm_any(transA, transB, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta,
               C + b * strideC, ldc);
  }
}

// OpenBLAS's own count stays 1 (see OneBlasThread). openblas_set_num_threads
// also sets the calling thread's OpenMP default, so set_num_threads calls this
// first and then sets that default to n.
void blas_single_threaded() { openblas_set_num_threads(1); }

int64_t gemm_flop_count() {
  int64_t n = 0;
  for (const FlopSlot& s : g_flops) n += s.n.load(std::memory_order_relaxed);
  return n;
}

}  // namespace qkv
