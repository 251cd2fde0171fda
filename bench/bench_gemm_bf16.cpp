// bench_gemm_bf16: bfloat16 products against float32 ones at the shapes of
// the benchmark configurations, 1 thread:
//
//   build/rel-f32/bench_gemm_bf16 --rounds 5
//
// For each shape (M, N, K, transpose flags: the base FFN's forward and
// gradient products, the gpt and tiny projections, the attention heads'
// products) it times gemm() at fp32 (OpenBLAS sgemm, libxsmm below 64^3),
// the bf16 emulation (gemm_bf16_emulated: rounding, then the fp32 product)
// and, where the CPU has AVX512-BF16, the vdpbf16ps kernel
// (gemm_bf16_native). Rounds interleave the three, each timing enough calls
// for 5e7 floating-point operations (a few ms on a quiet core); each is
// reported by the median of its rounds' GFLOP/s, with the slowest and
// fastest round (the machine may be shared: compare within a row; under a
// load the fastest round is the one least preempted). docs/precision.md.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/gemm_bf16.h"
#include "core/qkv_core.h"

using namespace qkv;

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct ProductShape {
  int64_t M, N, K;
  bool tA, tB;
  const char* what;
};
const ProductShape kShapes[] = {
    {1024, 2048, 512, false, true, "base FFN up, forward (B*T 1024, D 512, F 2048)"},
    {1024, 512, 2048, false, true, "base FFN down, forward"},
    {512, 2048, 1024, true, false, "base FFN up, weight gradient (K = B*T)"},
    {1024, 512, 2048, false, false, "base FFN down, input gradient"},
    {384, 512, 128, false, true, "gpt FFN up, forward (B*T 384, D 128, F 512)"},
    {384, 128, 512, false, true, "gpt FFN down, forward"},
    {64, 64, 32, false, true, "gpt attention scores Q K^T (T 64, d_k 32)"},
    {64, 32, 64, false, false, "gpt attention P V"},
    {12, 12, 16, false, true, "tiny attention scores (T 12, d_k 16)"},
    {12, 16, 12, false, false, "tiny attention P V"},
};

using Gemm = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                      const float*, int64_t, float, float*, int64_t);
void fp32(bool tA, bool tB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  CLI::App app{"bench_gemm_bf16: bf16 products against fp32 at the configurations' shapes"};
  app.add_option("--rounds", rounds, "interleaved rounds (the median is reported)")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  set_num_threads(1);
  std::vector<std::pair<const char*, Gemm>> kernels = {{"fp32 (sgemm/libxsmm)", fp32},
                                                       {"bf16 emulated", gemm_bf16_emulated}};
  if (bf16_native_available()) kernels.push_back({"bf16 vdpbf16ps", gemm_bf16_native});
  std::printf("bench_gemm_bf16: 1 thread, %d rounds; bf16 kernel: %s\n", rounds,
              bf16_native_available() ? "vdpbf16ps (AVX512-BF16)"
                                      : "none on this CPU or build (emulated only)");
  Generator g(1);
  for (const ProductShape& s : kShapes) {
    Tensor A = Tensor::normal({s.M, s.K}, 0, 1, g), B = Tensor::normal({s.K, s.N}, 0, 1, g);
    Tensor C = Tensor::zeros({s.M, s.N});
    const int64_t lda = s.tA ? s.M : s.K, ldb = s.tB ? s.K : s.N;
    const double flop = 2.0 * s.M * s.N * s.K;
    const int reps = std::max(1, static_cast<int>(5e7 / flop));
    std::vector<std::vector<double>> gf(kernels.size());
    for (int r = 0; r < rounds; ++r)
      for (size_t k = 0; k < kernels.size(); ++k) {
        const double t0 = now();
        for (int i = 0; i < reps; ++i)
          kernels[k].second(s.tA, s.tB, s.M, s.N, s.K, 1, A.data(), lda, B.data(), ldb, 0, C.data(),
                            s.N);
        gf[k].push_back(flop * reps / (now() - t0) * 1e-9);
      }
    std::printf("%s: %c%c M %lld N %lld K %lld\n", s.what, s.tA ? 'T' : 'N', s.tB ? 'T' : 'N',
                (long long)s.M, (long long)s.N, (long long)s.K);
    for (size_t k = 0; k < kernels.size(); ++k) {
      std::sort(gf[k].begin(), gf[k].end());
      std::printf("  %-22s %7.1f GFLOP/s median (rounds %.1f to %.1f)\n", kernels[k].first,
                  gf[k][gf[k].size() / 2], gf[k].front(), gf[k].back());
    }
  }
  return 0;
}
