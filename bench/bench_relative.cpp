// bench_relative: what T5's relative position bias costs inside the fused
// attention op. One self-attention layer at a base-like shape (D 512, 8
// heads, d_k 64; B 8, T = S 128, causal mask; the standard or
// memory-efficient kernel), forward and backward of sum(y * up), without the
// bias and with a causal table of 32 buckets, max distance 128 (T5's):
//
//   build/rel-f32/bench_relative --threads 1 --rounds 10
//   build/rel-f32/bench_relative --kernel memory-efficient --T 512 --B 2
//
// The two run interleaved, one forward+backward each per round, after one
// warm-up each; each is reported by its fastest round (the machine may be
// shared: compare within one run).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "autograd/qkv_autograd.h"
#include "core/parallel.h"
#include "nn/attention.h"

using namespace qkv;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  CLI::App app{"bench_relative: attention with and without T5's relative bias"};
  int64_t B = 8, T = 128, D = 512, H = 8, rounds = 10, threads = 1, buckets = 32;
  std::string kernel = "standard";
  app.add_option("--B", B);
  app.add_option("--T", T);
  app.add_option("--D", D);
  app.add_option("--heads", H);
  app.add_option("--rounds", rounds);
  app.add_option("--threads", threads);
  app.add_option("--kernel", kernel);
  CLI11_PARSE(app, argc, argv);
  set_num_threads(static_cast<int>(threads));
  Generator g(1);
  nn::MultiHeadAttention mha(D, H, true, g);
  mha.kernel = nn::attention_kernel_from_string(kernel);
  Var x(Tensor::normal({B, T, D}, 0, 1, g), true);
  const Tensor up = Tensor::normal({B, T, D}, 0, 1, g);
  Var table(Tensor::normal({H, buckets}, 0, 0.1, g), true);
  auto step = [&](bool relative) {
    mha.rel_bias = relative ? table : Var();
    mha.rel_bidirectional = false;
    mha.rel_max_distance = 128;
    const auto t0 = Clock::now();
    Var y = mha.forward(x, x, nn::AttentionMask::causal_mask());
    y.backward(up);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    x.clear_grad();
    mha.zero_grad();
    table.clear_grad();
    return s;
  };
  step(false), step(true);  // warm-up
  double best[2] = {1e30, 1e30};
  for (int64_t r = 0; r < rounds; ++r)
    for (int k = 0; k < 2; ++k) best[k] = std::min(best[k], step(k == 1));
  std::printf(
      "%s kernel, B %lld, T = S %lld, D %lld, %lld heads, causal, %lld threads, best of %lld\n",
      kernel.c_str(), (long long)B, (long long)T, (long long)D, (long long)H, (long long)threads,
      (long long)rounds);
  std::printf("  without bias  %8.2f ms forward+backward\n", best[0] * 1e3);
  std::printf("  with bias     %8.2f ms forward+backward  (%+.1f%%)\n", best[1] * 1e3,
              (best[1] / best[0] - 1) * 100);
  return 0;
}
