// bfloat16 products (core/gemm_bf16.h, set_matmul_precision in core/blas.h):
// the rounding itself; exact sums where every operand and partial sum is
// representable (any indexing slip in the packs or edges shows); each
// product's error against float64 within bfloat16's rounding bound; the
// vdpbf16ps kernel against the emulation where the CPU has it; and matmul
// under the setting. The bound is derived in docs/precision.md:
//
//   |c - c64| <= |alpha| (2u + u^2) S + g (|alpha| (1+u)^2 S + |beta c0|)
//   u = 2^-8 (bfloat16's unit roundoff), S = sum_k |a_k b_k| (float64),
//   g = gamma_{K+2} = (K+2) 2^-24 / (1 - (K+2) 2^-24) (float32 sums, alpha, beta)
//
// and two float32 sums of the same exact products differ by at most 2 g S'
// (S' = sum_k |round(a_k) round(b_k)|), the bound between the two kernels.
#include <doctest/doctest.h>

#include "test_seed.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/gemm_bf16.h"
#include "core/qkv_core.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

using namespace qkv;
using qkv::testing::test_generator;

namespace {
constexpr double kU = 1.0 / 256;          // bfloat16: 8 significant bits
constexpr double kU32 = 1.0 / (1 << 24);  // float32
double gamma32(int64_t n) { return n * kU32 / (1 - n * kU32); }

struct Case {
  bool tA, tB;
  int64_t M, N, K;
};
// Shapes around the kernel's tiles (12 x 32, K blocks of 256, A blocks of
// 96, B blocks of 512 columns), odd K, attention-sized and one of each
// transpose pair.
const Case kCases[] = {
    {false, false, 1, 1, 1},    {false, true, 13, 33, 7},     {true, false, 25, 31, 257},
    {true, true, 12, 32, 256},  {false, false, 97, 65, 300},  {false, true, 64, 64, 32},
    {true, false, 40, 520, 63}, {false, true, 100, 530, 514}, {false, false, 3, 17, 1},
};

std::string name(const Case& c) {
  return std::string(c.tA ? "T" : "N") + (c.tB ? "T" : "N") + " " + std::to_string(c.M) + "x" +
         std::to_string(c.N) + "x" + std::to_string(c.K);
}

// op(X)[i][k] of a row-major block stored (rows, cols) = (t ? (K,M) : (M,K)).
inline float at(const std::vector<float>& x, bool t, int64_t M, int64_t K, int64_t i, int64_t k) {
  return t ? x[k * M + i] : x[i * K + k];
}

using Gemm = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                      const float*, int64_t, float, float*, int64_t);

void through_gemm(bool tA, bool tB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
  gemm(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// The products a test runs: gemm() under the bf16 setting (the kernel this
// CPU runs), the emulation, and the vdpbf16ps kernel where it runs.
std::vector<std::pair<const char*, Gemm>> products() {
  std::vector<std::pair<const char*, Gemm>> p = {{"gemm() at bf16", through_gemm},
                                                 {"emulated", gemm_bf16_emulated}};
  if (bf16_native_available()) p.push_back({"vdpbf16ps", gemm_bf16_native});
  return p;
}

void run(Gemm f, const Case& c, float alpha, const std::vector<float>& A,
         const std::vector<float>& B, float beta, std::vector<float>& C) {
  f(c.tA, c.tB, c.M, c.N, c.K, alpha, A.data(), c.tA ? c.M : c.K, B.data(), c.tB ? c.K : c.N, beta,
    C.data(), c.N);
}
}  // namespace

TEST_CASE("bf16_bits rounds to nearest with ties to even, flushes subnormals, keeps inf and NaN") {
  auto bits = [](uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return bf16_bits(x);
  };
  CHECK(bits(0x3F800000u) == 0x3F80);  // 1
  CHECK(bits(0x3F808000u) == 0x3F80);  // 1 + 2^-8: a tie, to the even 1
  CHECK(bits(0x3F818000u) == 0x3F82);  // 1 + 3 2^-8: a tie, to the even 1 + 2^-6
  CHECK(bits(0x3F808001u) == 0x3F81);  // just above the tie: up
  CHECK(bits(0x3F807FFFu) == 0x3F80);  // just below: down
  CHECK(bits(0xBF808001u) == 0xBF81);  // the sign kept
  CHECK(bits(0x00000001u) == 0x0000);  // a subnormal: zero (as vcvtneps2bf16)
  CHECK(bits(0x807FFFFFu) == 0x8000);  // a negative subnormal: -0
  CHECK(bits(0x00800000u) == 0x0080);  // the least normal stays
  CHECK(bits(0x7F800000u) == 0x7F80);  // inf
  CHECK(bits(0x7F7FFFFFu) == 0x7F80);  // the largest float rounds up to inf
  CHECK(bits(0x7F800001u) == 0x7FC0);  // a signalling NaN: quiet NaN
  CHECK(bits(0xFFC00001u) == 0xFFC0);  // a NaN stays NaN
  CHECK(bf16_round(1.0f + 1.0f / 1024) == 1.0f);
}

#if defined(__AVX512BF16__)
TEST_CASE("bf16_bits equals the CPU's own conversion (vcvtneps2bf16) on random bit patterns") {
  if (!bf16_native_available()) return;  // built for AVX512-BF16, run elsewhere
  Generator g = test_generator();
  alignas(64) uint32_t in[16];
  alignas(64) uint16_t out[16];
  for (int n = 0; n < 1 << 16; ++n) {
    for (uint32_t& u : in) u = static_cast<uint32_t>(g.next_u64());
    _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                       (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(reinterpret_cast<float*>(in))));
    for (int j = 0; j < 16; ++j) {
      float x;
      std::memcpy(&x, &in[j], 4);
      const bool nan = std::isnan(x);  // the hardware's NaN payload is not ours to promise
      if (nan ? (out[j] & 0x7FC0) != 0x7FC0 : out[j] != bf16_bits(x))
        FAIL_CHECK("bits " << in[j] << ": hardware " << out[j] << ", bf16_bits " << bf16_bits(x));
    }
  }
}
#endif

TEST_CASE("bf16 products are exact where every operand and sum is representable, on every kernel") {
  // Small integers (bfloat16 holds them exactly) and alpha, beta powers of 2:
  // every product and partial sum is an integer below 2^24 times a power of
  // 2, so each kernel must give the float64 answer exactly; a slip in
  // packing, transposes or edge tiles changes some element.
  Generator g = test_generator();
  for (const Case& c : kCases) {
    std::vector<float> A(c.M * c.K), B(c.K * c.N), C0(c.M * c.N);
    for (float& x : A) x = static_cast<float>(g.randint(-8, 9));
    for (float& x : B) x = static_cast<float>(g.randint(-8, 9));
    for (float& x : C0) x = static_cast<float>(g.randint(-100, 101));
    for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.5f, 1.0f}, {2.0f, -0.25f}}) {
      std::vector<double> want(c.M * c.N);
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < c.K; ++k)
            s += double(at(A, c.tA, c.M, c.K, i, k)) * at(B, c.tB, c.K, c.N, k, j);
          want[i * c.N + j] = alpha * s + beta * C0[i * c.N + j];
        }
      for (const auto& [what, f] : products()) {
        std::vector<float> C = C0;
        run(f, c, alpha, A, B, beta, C);
        int64_t wrong = 0;
        for (int64_t e = 0; e < c.M * c.N; ++e) wrong += double(C[e]) != want[e];
        INFO(what << " " << name(c) << " alpha " << alpha << " beta " << beta);
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("each bf16 product's error against float64 is within bfloat16's rounding bound") {
  Generator g = test_generator();
  for (const Case& c : kCases) {
    std::vector<float> A(c.M * c.K), B(c.K * c.N), C0(c.M * c.N);
    for (float& x : A) x = static_cast<float>(g.normal());
    for (float& x : B) x = static_cast<float>(g.normal());
    for (float& x : C0) x = static_cast<float>(g.normal());
    const float alpha = 0.75f, beta = c.K % 2 ? 0.0f : 1.5f;
    for (const auto& [what, f] : products()) {
      std::vector<float> C = C0;
      run(f, c, alpha, A, B, beta, C);
      int64_t over = 0, rounded = 0;
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) {
          double s = 0, S = 0, s16 = 0;
          for (int64_t k = 0; k < c.K; ++k) {
            const float a = at(A, c.tA, c.M, c.K, i, k), b = at(B, c.tB, c.K, c.N, k, j);
            s += double(a) * b;
            S += std::fabs(double(a) * b);
            s16 += double(bf16_round(a)) * bf16_round(b);
          }
          const double c0 = C0[i * c.N + j], got = C[i * c.N + j];
          const double bound = std::fabs(alpha) * (2 * kU + kU * kU) * S +
                               gamma32(c.K + 2) * (std::fabs(alpha) * (1 + kU) * (1 + kU) * S +
                                                   std::fabs(beta * c0));
          over += std::fabs(got - (alpha * s + beta * c0)) > bound;
          // And it did round: closer to the sum of rounded operands than the
          // float32 accumulation bound allows an unrounded one to be.
          rounded += std::fabs(got - (alpha * s16 + beta * c0)) <=
                     gamma32(c.K + 2) *
                         (std::fabs(alpha) * (1 + kU) * (1 + kU) * S + std::fabs(beta * c0));
        }
      INFO(what << " " << name(c));
      CHECK(over == 0);
      CHECK(rounded == c.M * c.N);
    }
  }
}

TEST_CASE("the vdpbf16ps kernel equals the emulation within the float32 accumulation bound") {
  if (!bf16_native_available()) return;  // nothing to compare on this CPU
  Generator g = test_generator();
  for (const Case& c : kCases) {
    std::vector<float> A(c.M * c.K), B(c.K * c.N);
    for (float& x : A) x = static_cast<float>(g.normal());
    for (float& x : B) x = static_cast<float>(g.normal());
    std::vector<float> fast(c.M * c.N), emu(c.M * c.N);
    run(gemm_bf16_native, c, 1, A, B, 0, fast);
    run(gemm_bf16_emulated, c, 1, A, B, 0, emu);
    // Both sum the same exact products of rounded operands in float32, in
    // different orders (pairs in vdpbf16ps, blocks of K): each is within
    // g S' of the exact sum, so within 2 g S' of each other.
    int64_t over = 0;
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        double S16 = 0;
        for (int64_t k = 0; k < c.K; ++k)
          S16 += std::fabs(double(bf16_round(at(A, c.tA, c.M, c.K, i, k))) *
                           bf16_round(at(B, c.tB, c.K, c.N, k, j)));
        over +=
            std::fabs(double(fast[i * c.N + j]) - emu[i * c.N + j]) > 2 * gamma32(c.K + 2) * S16;
      }
    INFO(name(c));
    CHECK(over == 0);
  }
}

TEST_CASE("bf16 products on strided views read and write only the view, as with tight strides") {
  // Attention's per-head products take d_k columns of a (T, D) row: lda, ldb
  // and ldc wider than the view. Each operand sits in a wider buffer whose
  // padding is NaN (a read of it would spread NaN into C) and C's padding is a
  // sentinel (a write would change it); the result must equal the same
  // product on tightly packed copies, bit for bit (same kernel, same order).
  Generator g = test_generator();
  const int64_t pad = 5;
  const float nan = std::nanf(""), sentinel = 12345.f;
  for (const Case& c : kCases) {
    const int64_t ra = c.tA ? c.K : c.M, ca = c.tA ? c.M : c.K;  // A's stored (rows, cols)
    const int64_t rb = c.tB ? c.N : c.K, cb = c.tB ? c.K : c.N;
    const int64_t lda = ca + pad, ldb = cb + pad + 2, ldc = c.N + pad + 1;
    std::vector<float> A(ra * ca), B(rb * cb), C0(c.M * c.N);
    for (float& x : A) x = static_cast<float>(g.normal());
    for (float& x : B) x = static_cast<float>(g.normal());
    for (float& x : C0) x = static_cast<float>(g.normal());
    std::vector<float> As(ra * lda, nan), Bs(rb * ldb, nan);
    for (int64_t r = 0; r < ra; ++r) std::memcpy(&As[r * lda], &A[r * ca], ca * sizeof(float));
    for (int64_t r = 0; r < rb; ++r) std::memcpy(&Bs[r * ldb], &B[r * cb], cb * sizeof(float));
    for (const auto& [what, f] : products()) {
      std::vector<float> tight = C0, Cs(c.M * ldc, sentinel);
      for (int64_t i = 0; i < c.M; ++i)
        std::memcpy(&Cs[i * ldc], &C0[i * c.N], c.N * sizeof(float));
      f(c.tA, c.tB, c.M, c.N, c.K, 0.75f, A.data(), ca, B.data(), cb, 0.5f, tight.data(), c.N);
      f(c.tA, c.tB, c.M, c.N, c.K, 0.75f, As.data(), lda, Bs.data(), ldb, 0.5f, Cs.data(), ldc);
      int64_t differ = 0, padding_written = 0;
      for (int64_t i = 0; i < c.M; ++i) {
        for (int64_t j = 0; j < c.N; ++j)
          differ += std::memcmp(&Cs[i * ldc + j], &tight[i * c.N + j], sizeof(float)) != 0;
        for (int64_t j = c.N; j < ldc; ++j) padding_written += Cs[i * ldc + j] != sentinel;
      }
      INFO(what << " " << name(c));
      CHECK(differ == 0);
      CHECK(padding_written == 0);
    }
  }
}

TEST_CASE("matmul under set_matmul_precision(bf16) rounds its operands; the scope restores fp32") {
  CHECK(matmul_precision() == MatmulPrecision::fp32);
  // (1 + 2^-10) is no bfloat16: rounded, it is 1, so the product is 3, not 3 + 3 2^-10.
  Tensor a = Tensor::from_vector({1.0f + 1.0f / 1024, 1, 1}, {1, 3});
  Tensor b = Tensor::from_vector({1, 1, 1}, {3, 1});
  CHECK(matmul(a, b).item() == 3.0f + 1.0f / 1024);
  {
    const MatmulPrecisionScope bf16(MatmulPrecision::bf16);
    CHECK(matmul_precision() == MatmulPrecision::bf16);
    CHECK(matmul(a, b).item() == 3.0f);
    // batched (per-head sized) products round too
    Tensor x = Tensor::from_vector({1.0f + 1.0f / 1024, 1, 1, 1}, {2, 1, 2});
    Tensor y = Tensor::from_vector({1, 1, 1, 1}, {2, 2, 1});
    CHECK(matmul(x, y).to_vector() == std::vector<real>{2, 2});
  }
  CHECK(matmul_precision() == MatmulPrecision::fp32);
  CHECK(std::string(precision_name(MatmulPrecision::bf16)) == "bf16");
}
