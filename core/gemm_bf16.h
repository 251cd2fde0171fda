// bfloat16 matrix products with float32 accumulation, the kernels behind
// set_matmul_precision(MatmulPrecision::bf16) (core/blas.h). Operands stay
// float32 in memory; each product rounds them to bfloat16 as it reads them
// (round to nearest, ties to even; the derivation and the error bound are in
// docs/precision.md) and sums the exact products in float32.
//
// Two implementations compute the same thing:
//   gemm_bf16_emulated: rounds op(A) and op(B) into float32 scratch (each
//     value a bfloat16 one, its low 16 bits zero) and runs the ordinary
//     float32 product on them. A product of two bfloat16 numbers (8-bit
//     significands) is exact in float32 (24 bits), so this is bfloat16
//     multiplication with float32 accumulation on any CPU: the reference.
//   gemm_bf16_native: packs the rounded operands as bfloat16 pairs and sums
//     them with the AVX512-BF16 instruction vdpbf16ps. Compiled only where
//     the compiler targets AVX512-BF16 (__AVX512BF16__) and run only on a CPU
//     that has it (bf16_native_available()).
// Both accumulate in float32, in different orders; they agree within the
// float32 accumulation bound, not bit for bit (tests/test_gemm_bf16.cpp).
#pragma once
#include <cstdint>
#include <cstring>

namespace qkv {

// The bfloat16 nearest to x (ties to even), as its 16 bits: the upper half of
// a float32. Like the hardware conversion (vcvtneps2bf16), a float32
// subnormal becomes a zero of its sign and a NaN stays a (quiet) NaN.
inline uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7F800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);  // 0, subnormal
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7FFFu + ((u >> 16) & 1u);  // round the low 16 bits to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

// x rounded to bfloat16, as a float32 (its low 16 bits zero).
inline float bf16_round(float x) {
  const uint32_t u = static_cast<uint32_t>(bf16_bits(x)) << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// True when this build has the vdpbf16ps kernel and the CPU runs it.
bool bf16_native_available();

// C (M,N) = alpha * op(A) op(B) + beta * C, row-major as gemm() in
// core/blas.h, with op(A) and op(B) rounded to bfloat16. One thread each (the
// caller cuts big products across threads, as for float32).
void gemm_bf16_emulated(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
                        const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                        float* C, int64_t ldc);
// Throws when !bf16_native_available().
void gemm_bf16_native(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                      float* C, int64_t ldc);

}  // namespace qkv
