// The vdpbf16ps product (see core/gemm_bf16.h). The emulated product, which
// is the float32 product on rounded operands, is in core/blas.cpp beside it.
//
// vdpbf16ps (AVX512-BF16) takes 16 float32 accumulators and two vectors of 16
// bfloat16 pairs, and adds to accumulator j the sum a[2j] b[2j] + a[2j+1]
// b[2j+1]. So both operands are packed as pairs along K:
//   op(B) (K,N), a block of kc rows and a panel of 32 columns:
//     pb[p][j] = (B[2p][j], B[2p+1][j])          32-bit pairs, (kc/2, 32)
//   op(A) (M,K), a tile of kMR rows:
//     pa[r][p] = (A[r][2p], A[r][2p+1])          (kMR, kc/2)
// and the micro-kernel keeps a (kMR, 32) tile of C in 2*kMR registers: for
// each pair p, two loads of pb[p] and one broadcast of pa[r][p] per row r.
// Blocks as in a BLAS: kNC columns of B at a time (their packed block, kc x
// kNC bfloat16 = 256 KB, stays in L2), kKC rows of K, kMC rows of A (48 KB).
// A K odd is padded with a zero pair half; the edges of M and N with zero
// rows and columns in the packs, and C's edge tiles are stored masked.
#include "core/gemm_bf16.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

#if defined(__AVX512BF16__) && defined(__x86_64__)
#include <immintrin.h>
#define QKV_BF16_KERNEL 1
#endif

namespace qkv {

bool cpu_has_avx512_bf16();  // core/cpu_check.cpp

bool bf16_native_available() {
#ifdef QKV_BF16_KERNEL
  static const bool has = cpu_has_avx512_bf16();
  return has;
#else
  return false;
#endif
}

#ifndef QKV_BF16_KERNEL
void gemm_bf16_native(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                      const float*, int64_t, float, float*, int64_t) {
  throw Error(
      "gemm_bf16_native: this build has no AVX512-BF16 kernel (built without "
      "__AVX512BF16__); use gemm_bf16_emulated");
}
#else
namespace {
constexpr int kMR = 12;       // rows of C per micro-tile (24 accumulators)
constexpr int kNR = 32;       // columns of C per micro-tile (2 vectors)
constexpr int64_t kKC = 256;  // rows of K per packed block (even)
constexpr int64_t kMC = 96;   // rows of A per packed block (a multiple of kMR)
constexpr int64_t kNC = 512;  // columns of B per packed block (a multiple of kNR)

// 16 pairs (r0[j], r1[j]) of two contiguous float rows, rounded by the
// hardware conversion (the same rounding as bf16_bits).
inline __m512i pairs16(const float* r0, const float* r1, __mmask16 m) {
  const __m256i lo = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r0));
  const __m256i hi = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r1));
  // (the maskz forms: GCC 12 warns of the plain ones' undefined pass-through)
  const __mmask16 all = 0xFFFF;
  return _mm512_or_si512(_mm512_maskz_cvtepu16_epi32(all, lo),
                         _mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, hi), 16));
}
inline __mmask16 first(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

// Pack rows [k0, k0+kc) and columns [j0, j0+nc) of op(B) (K,N) into panels of
// kNR columns: panel q at pb + q*kp*kNR, pb[p][j] as above; kp = (kc+1)/2.
void pack_b(bool transB, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
            int64_t nc, uint32_t* pb) {
  const int64_t kp = (kc + 1) / 2;
  static const float zeros[kNR] = {};
  for (int64_t q = 0; q * kNR < nc; ++q) {
    uint32_t* panel = pb + q * kp * kNR;
    const int64_t jb = j0 + q * kNR, w = std::min<int64_t>(kNR, nc - q * kNR);
    if (!transB) {  // row k of op(B) is row k of B: contiguous columns
      for (int64_t p = 0; p < kp; ++p) {
        const int64_t k = k0 + 2 * p;
        const float* r0 = B + k * ldb + jb;
        const float* r1 = 2 * p + 1 < kc ? r0 + ldb : zeros;
        const int64_t step1 = 2 * p + 1 < kc ? 16 : 0;
        _mm512_storeu_si512(panel + p * kNR, pairs16(r0, r1, first(w)));
        _mm512_storeu_si512(panel + p * kNR + 16,
                            pairs16(r0 + 16, r1 + step1, first(w > 16 ? w - 16 : 0)));
      }
    } else {  // op(B)[k][j] = B[j][k]: column j's pairs are contiguous in row j of B
      alignas(64) uint32_t tmp[16];
      for (int64_t j = 0; j < kNR; ++j) {
        if (j >= w) {
          for (int64_t p = 0; p < kp; ++p) panel[p * kNR + j] = 0u;
          continue;
        }
        const float* row = B + (jb + j) * ldb + k0;
        int64_t p = 0;
        for (; 2 * p + 32 <= kc; p += 16) {  // 32 floats -> 16 pairs, then down column j
          const __m512 x0 = _mm512_loadu_ps(row + 2 * p), x1 = _mm512_loadu_ps(row + 2 * p + 16);
          _mm512_store_si512(tmp, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
          for (int s = 0; s < 16; ++s) panel[(p + s) * kNR + j] = tmp[s];
        }
        if (p < kp) {  // the last < 32 floats, zero-padded to whole pairs
          const int64_t rest = kc - 2 * p;
          const __m512 x0 = _mm512_maskz_loadu_ps(first(rest), row + 2 * p);
          const __m512 x1 =
              _mm512_maskz_loadu_ps(first(rest > 16 ? rest - 16 : 0), row + 2 * p + 16);
          _mm512_store_si512(tmp, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
          for (int64_t s = 0; s < kp - p; ++s) panel[(p + s) * kNR + j] = tmp[s];
        }
      }
    }
  }
}

// Pack rows [i0, i0+mc) and K columns [k0, k0+kc) of op(A) (M,K) into tiles
// of kMR rows: tile t at pa + t*kMR*kp, pa[r][p] as above.
void pack_a(bool transA, const float* A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
            int64_t kc, uint32_t* pa) {
  const int64_t kp = (kc + 1) / 2;
  const int64_t rows = (mc + kMR - 1) / kMR * kMR;
  if (!transA) {  // row i of op(A) is row i of A: pairs contiguous
    for (int64_t r = 0; r < rows; ++r) {
      uint32_t* out = pa + r * kp;
      if (r >= mc) {
        std::fill(out, out + kp, 0u);
        continue;
      }
      const float* a = A + (i0 + r) * lda + k0;
      int64_t p = 0;
      for (; 2 * p + 32 <= kc; p += 16) {  // 32 floats -> 16 pairs, in order
        const __m512 x0 = _mm512_loadu_ps(a + 2 * p), x1 = _mm512_loadu_ps(a + 2 * p + 16);
        _mm512_storeu_si512(out + p, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
      }
      if (p < kp) {  // the last < 32 floats, zero-padded to whole pairs
        const int64_t rest = kc - 2 * p;
        const __m512 x0 = _mm512_maskz_loadu_ps(first(rest), a + 2 * p);
        const __m512 x1 = _mm512_maskz_loadu_ps(first(rest > 16 ? rest - 16 : 0), a + 2 * p + 16);
        _mm512_mask_storeu_epi32(out + p, first(kp - p), (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
      }
    }
  } else {  // op(A)[i][k] = A[k][i]: rows 2p and 2p+1 of A give row i's pair p
    alignas(64) uint32_t tmp[16];
    for (int64_t p = 0; p < kp; ++p) {
      const float* r0 = A + (k0 + 2 * p) * lda + i0;
      const bool odd = 2 * p + 1 >= kc;
      for (int64_t r = 0; r < rows; r += 16) {
        const __mmask16 m = first(std::max<int64_t>(0, std::min<int64_t>(16, mc - r)));
        const __m512i v = odd ? pairs16(r0 + r, r0 + r, m) : pairs16(r0 + r, r0 + r + lda, m);
        _mm512_store_si512(tmp, odd ? _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)) : v);
        for (int64_t s = 0; s < 16 && r + s < rows; ++s) pa[(r + s) * kp + p] = tmp[s];
      }
    }
  }
}

// C (mr, nr) tile = alpha * pa-tile x pb-panel + beta * C (mr <= kMR, nr <= kNR).
void micro(int64_t kp, const uint32_t* __restrict pa, const uint32_t* __restrict pb, float* C,
           int64_t ldc, int mr, int nr, float alpha, float beta) {
  __m512 acc[kMR][2];
#pragma GCC unroll 12
  for (int r = 0; r < kMR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(pb + p * kNR);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(pb + p * kNR + 16);
#pragma GCC unroll 12
    for (int r = 0; r < kMR; ++r) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(pa[r * kp + p]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
    }
  }
  const __mmask16 m0 = first(nr), m1 = first(nr > 16 ? nr - 16 : 0);
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
  for (int r = 0; r < kMR; ++r) {
    if (r >= mr) break;
    float* c = C + r * ldc;
    __m512 x0 = _mm512_mul_ps(va, acc[r][0]), x1 = _mm512_mul_ps(va, acc[r][1]);
    if (beta != 0) {
      x0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, c), x0);
      x1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, c + 16), x1);
    }
    _mm512_mask_storeu_ps(c, m0, x0);
    _mm512_mask_storeu_ps(c + 16, m1, x1);
  }
}
}  // namespace

void gemm_bf16_native(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                      float* C, int64_t ldc) {
  if (!bf16_native_available())
    throw Error("gemm_bf16_native: this CPU lacks AVX512-BF16 (avx512_bf16)");
  // Packed blocks, one pair per 32 bits; grown once per thread, reused.
  thread_local std::vector<uint32_t> pb, pa;
  const int64_t kpmax = (std::min(K, kKC) + 1) / 2;
  pb.resize(static_cast<size_t>(kpmax * kNC));
  pa.resize(static_cast<size_t>(kpmax * kMC));
  for (int64_t jc = 0; jc < N; jc += kNC) {
    const int64_t nc = std::min(kNC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kKC) {
      const int64_t kc = std::min(kKC, K - pc), kp = (kc + 1) / 2;
      const float b = pc == 0 ? beta : 1.0f;  // later K blocks add to C
      pack_b(transB, B, ldb, pc, kc, jc, nc, pb.data());
      for (int64_t ic = 0; ic < M; ic += kMC) {
        const int64_t mc = std::min(kMC, M - ic);
        pack_a(transA, A, lda, ic, mc, pc, kc, pa.data());
        for (int64_t q = 0; q * kNR < nc; ++q)
          for (int64_t t = 0; t * kMR < mc; ++t)
            micro(kp, pa.data() + t * kMR * kp, pb.data() + q * kp * kNR,
                  C + (ic + t * kMR) * ldc + jc + q * kNR, ldc,
                  static_cast<int>(std::min<int64_t>(kMR, mc - t * kMR)),
                  static_cast<int>(std::min<int64_t>(kNR, nc - q * kNR)), alpha, b);
      }
    }
  }
}
#endif  // QKV_BF16_KERNEL

}  // namespace qkv
