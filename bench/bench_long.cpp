// bench_long: the attention kernels at long sequences. One attention layer
// (nn::MultiHeadAttention, batch 1, 4 heads, d_k 32, so D = 128, no mask),
// forward and backward of sum(y * up):
//
//   build/rel-f32/bench_long --threads 1 --rounds 5          (everything below)
//   build/rel-f32/bench_long --only memory --rounds 3
//
// Sections (--only picks one):
//   memory    standard vs memory-efficient at T = 512 .. 8192: seconds per
//             forward+backward and the peak bytes of tensor storage during it
//             (qkv's allocator, above what the weights and inputs hold), and
//             the process's peak RSS; each peak is taken in a child process
//             of its own (this program run with --measure), so one
//             measurement's peak does not hide another's.
//   sparse    sparse (w = 128, g = 64) vs dense (the standard kernel) at T = 2048.
//   linear    linear vs standard attention (non-causal) from T = 128 to
//             8192, to find where linear attention becomes faster.
// Timing: the kernels of a section run interleaved, one forward+backward
// each per round, after one warm-up; each is reported by its fastest round
// (the machine may be shared: compare within one run).
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "core/allocator.h"
#include "core/blas.h"
#include "core/parallel.h"
#include "nn/attention.h"

using namespace qkv;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kHeads = 4, kHeadSize = 32, kD = kHeads * kHeadSize;

struct Setup {
  nn::AttentionKernel kernel;
  int64_t T;
  nn::SparsePattern sparse{128, 64};
};

struct Layer {
  nn::MultiHeadAttention mha;
  Var x;
  Tensor up;
  Layer(int64_t T, Generator& g)
      : mha(kD, kHeads, true, g),
        x(Tensor::normal({1, T, kD}, 0, 1, g), true),
        up(Tensor::normal({1, T, kD}, 0, 1, g)) {}
  void step(const Setup& s) {
    mha.kernel = s.kernel;
    mha.sparse = s.sparse;
    Var y = mha.forward(x, x);
    y.backward(up);
    mha.zero_grad();
    x.clear_grad();
  }
};

// Peak tensor bytes of one forward+backward above what was allocated before
// it, and the process's peak RSS (bytes); run in a process of its own.
int measure(const Setup& s) {
  Generator g(1);
  Layer layer(s.T, g);
  const int64_t before = allocator_stats().bytes_in_use;
  layer.step(s);
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("%lld %lld\n", static_cast<long long>(allocator_stats().peak_in_use - before),
              static_cast<long long>(ru.ru_maxrss) * 1024);
  return 0;
}

std::pair<double, double> measure_in_child(const std::string& self, const Setup& s, int threads) {
  const std::string cmd = self + " --measure " + nn::to_string(s.kernel) + " --T " +
                          std::to_string(s.T) + " --threads " + std::to_string(threads) +
                          " --window " + std::to_string(s.sparse.window) + " --global-every " +
                          std::to_string(s.sparse.global_every);
  FILE* p = popen(cmd.c_str(), "r");
  long long peak = -1, rss = -1;
  if (!p || std::fscanf(p, "%lld %lld", &peak, &rss) != 2) peak = rss = -1;
  if (p) pclose(p);
  return {double(peak), double(rss)};
}

// Best seconds per forward+backward of each setup, interleaved rounds.
std::vector<double> time_interleaved(const std::vector<Setup>& setups, int rounds) {
  std::vector<double> best(setups.size(), 1e30);
  std::map<int64_t, std::unique_ptr<Layer>> layers;  // one layer per length
  Generator g(1);
  for (const Setup& s : setups)
    if (!layers.count(s.T)) layers[s.T] = std::make_unique<Layer>(s.T, g);
  for (size_t i = 0; i < setups.size(); ++i) layers[setups[i].T]->step(setups[i]);  // warm-up
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < setups.size(); ++i) {
      const auto t0 = Clock::now();
      layers[setups[i].T]->step(setups[i]);
      best[i] = std::min(best[i], std::chrono::duration<double>(Clock::now() - t0).count());
    }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, rounds = 5;
  std::string only, measure_kernel;
  int64_t T = 0, window = 128, global_every = 64;
  CLI::App app{"bench_long: attention kernels at long sequences (qkv)"};
  app.add_option("--threads", threads, "threads for our kernels")->check(CLI::Range(1, 256));
  app.add_option("--rounds", rounds, "timed rounds (the fastest is reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--only", only, "one section: memory, sparse, linear");
  app.add_option("--measure", measure_kernel, "(internal) measure one kernel's peak memory");
  app.add_option("--T", T, "(internal) the length for --measure");
  app.add_option("--window", window, "sparse window")->check(CLI::Range(1, 1 << 20));
  app.add_option("--global-every", global_every, "sparse global positions")
      ->check(CLI::Range(0, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);
  blas_single_threaded();
  const nn::SparsePattern sp{window, global_every};
  if (!measure_kernel.empty())
    return measure({nn::attention_kernel_from_string(measure_kernel), T, sp});
  const std::string self = argv[0];
  using K = nn::AttentionKernel;

  std::printf(
      "One attention layer (batch 1, %lld heads, d_k %lld, no mask), forward + backward, %d"
      " thread(s), best of %d interleaved rounds (at T >= 4096 best of %d).\n",
      static_cast<long long>(kHeads), static_cast<long long>(kHeadSize), threads, rounds,
      std::max(1, rounds / 2));
  if (only.empty() || only == "memory") {
    std::printf(
        "\n### Standard vs memory-efficient\n\n| T | standard s | memory-efficient s | time ratio |"
        " standard peak MiB | memory-efficient peak MiB | standard RSS MiB |"
        " memory-efficient RSS MiB |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int64_t t : {512, 1024, 2048, 4096, 8192}) {
      const std::vector<Setup> s{{K::Standard, t}, {K::MemoryEfficient, t}};
      const std::vector<double> sec =
          time_interleaved(s, t >= 4096 ? std::max(1, rounds / 2) : rounds);
      const auto ms = measure_in_child(self, s[0], threads);
      const auto mm = measure_in_child(self, s[1], threads);
      std::printf("| %lld | %.4f | %.4f | %.2f | %.1f | %.1f | %.1f | %.1f |\n",
                  static_cast<long long>(t), sec[0], sec[1], sec[1] / sec[0], ms.first / (1 << 20),
                  mm.first / (1 << 20), ms.second / (1 << 20), mm.second / (1 << 20));
      std::fflush(stdout);
    }
  }
  if (only.empty() || only == "sparse") {
    const int64_t t = 2048;
    const std::vector<Setup> s{{K::Standard, t}, {K::Sparse, t, sp}, {K::MemoryEfficient, t}};
    const std::vector<double> sec = time_interleaved(s, rounds);
    std::printf(
        "\n### Sparse vs dense\n\nT %lld, window %lld, global every %lld: dense (the standard"
        " kernel, every score) %.4f s, sparse %.4f s: %.2fx faster. The memory-efficient kernel"
        " over every score: %.4f s.\n",
        static_cast<long long>(t), static_cast<long long>(sp.window),
        static_cast<long long>(sp.global_every), sec[0], sec[1], sec[0] / sec[1], sec[2]);
    std::fflush(stdout);
  }
  if (only.empty() || only == "linear") {
    std::printf(
        "\n### Linear vs softmax (standard) attention, non-causal\n\n| T | standard s |"
        " linear s | standard / linear |\n|---:|---:|---:|---:|\n");
    for (int64_t t : {64, 128, 192, 256, 512, 1024, 2048, 4096, 8192}) {
      const std::vector<Setup> s{{K::Standard, t}, {K::Linear, t}};
      const std::vector<double> sec =
          time_interleaved(s, t >= 4096 ? std::max(1, rounds / 2) : rounds);
      std::printf("| %lld | %.5f | %.5f | %.2f |\n", static_cast<long long>(t), sec[0], sec[1],
                  sec[0] / sec[1]);
      std::fflush(stdout);
    }
  }
  return 0;
}
