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
//   linear    linear vs standard attention (non-causal) from T = 64 to
//             8192, to find where linear attention becomes faster.
//   recompute a GPT (D 128, 4 heads, 4 layers, d_ff 512, dropout 0.1, vocab
//             256) training step without the optimizer (forward, cross-entropy,
//             backward) with Recompute None, FFN and Layer: seconds and peak
//             tensor bytes, at B 8, T 256 and, with each attention kernel, at
//             B 1, T 2048.
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
#include "io/run_program.h"
#include "models/gpt.h"
#include "nn/attention.h"
#include "nn/cross_entropy.h"

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

// ---- The recompute section: a GPT training step ----------------------------------------

struct ModelSetup {
  int64_t B, T;
  nn::AttentionKernel kernel;
  nn::Recompute recompute;
};

const char* recompute_name(nn::Recompute r) {
  return r == nn::Recompute::None ? "none" : r == nn::Recompute::FFN ? "ffn" : "layer";
}

struct Model {
  nn::GPT gpt;
  nn::Tokens ids;
  std::vector<int64_t> targets;
  static nn::GPTConfig config(int64_t T) {
    nn::GPTConfig c;
    c.vocab = 256;
    c.d_model = 128;
    c.heads = 4;
    c.layers = 4;
    c.d_ff = 512;
    c.max_positions = T;
    c.dropout = 0.1;
    c.seed = 1;
    return c;
  }
  Model(int64_t B, int64_t T) : gpt(config(T)), ids{{}, B, T, {}} {
    Generator g(2);
    for (int64_t i = 0; i < B * T; ++i) ids.ids.push_back(g.randint(0, 256));
    for (int64_t i = 0; i < B * T; ++i) targets.push_back(g.randint(0, 256));
    gpt.train();
  }
  void step(const ModelSetup& s) {
    for (auto& l : gpt.layers) {
      l->recompute = s.recompute;
      l->self_attn->kernel = s.kernel;
    }
    nn::cross_entropy(gpt.forward(ids), targets).backward();
    gpt.zero_grad();
  }
};

int measure_model(const ModelSetup& s) {
  Model m(s.B, s.T);
  const int64_t before = allocator_stats().bytes_in_use;
  m.step(s);
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("%lld %lld\n", static_cast<long long>(allocator_stats().peak_in_use - before),
              static_cast<long long>(ru.ru_maxrss) * 1024);
  return 0;
}

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

// Runs this program again (without a shell: io/run_program.h) and reads the
// two numbers it prints: the peak of qkv's allocator and the peak RSS.
std::pair<double, double> peaks_of_child(const std::vector<std::string>& argv) {
  long long peak = -1, rss = -1;
  try {
    const ProgramRun r = run_program(argv);
    if (r.status != 0 || std::sscanf(r.out.c_str(), "%lld %lld", &peak, &rss) != 2) peak = rss = -1;
  } catch (const std::exception&) {
    peak = rss = -1;
  }
  return {double(peak), double(rss)};
}

std::pair<double, double> measure_in_child(const std::string& self, const Setup& s, int threads) {
  return peaks_of_child({self, "--measure", nn::to_string(s.kernel), "--T", std::to_string(s.T),
                         "--threads", std::to_string(threads), "--window",
                         std::to_string(s.sparse.window), "--global-every",
                         std::to_string(s.sparse.global_every)});
}

double peak_model_in_child(const std::string& self, const ModelSetup& s, int threads) {
  return peaks_of_child({self, "--measure-model", nn::to_string(s.kernel), "--recompute",
                         recompute_name(s.recompute), "--B", std::to_string(s.B), "--T",
                         std::to_string(s.T), "--threads", std::to_string(threads)})
      .first;
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
  int64_t T = 0, B = 1, window = 128, global_every = 64;
  std::string measure_model_kernel, recompute = "none";
  CLI::App app{"bench_long: attention kernels at long sequences (qkv)"};
  app.add_option("--threads", threads, "threads for our kernels")->check(CLI::Range(1, 256));
  app.add_option("--rounds", rounds, "timed rounds (the fastest is reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--only", only, "one section: memory, sparse, linear");
  app.add_option("--measure", measure_kernel, "(internal) measure one kernel's peak memory");
  app.add_option("--T", T, "(internal) the length for --measure");
  app.add_option("--B", B, "(internal) the batch for --measure-model");
  app.add_option("--measure-model", measure_model_kernel,
                 "(internal) measure a GPT step's peak memory with this kernel");
  app.add_option("--recompute", recompute, "(internal) none, ffn or layer for --measure-model");
  app.add_option("--window", window, "sparse window")->check(CLI::Range(1, 1 << 20));
  app.add_option("--global-every", global_every, "sparse global positions")
      ->check(CLI::Range(0, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);
  blas_single_threaded();
  const nn::SparsePattern sp{window, global_every};
  if (!measure_kernel.empty())
    return measure({nn::attention_kernel_from_string(measure_kernel), T, sp});
  if (!measure_model_kernel.empty())
    return measure_model({B, T, nn::attention_kernel_from_string(measure_model_kernel),
                          recompute == "layer" ? nn::Recompute::Layer
                          : recompute == "ffn" ? nn::Recompute::FFN
                                               : nn::Recompute::None});
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
  if (only.empty() || only == "recompute") {
    std::printf(
        "\n### Recompute: a GPT step (D 128, 4 heads, 4 layers, d_ff 512, dropout 0.1)\n\n"
        "| B x T | attention | recompute | step s | peak MiB |\n|---|---|---|---:|---:|\n");
    using R = nn::Recompute;
    const std::vector<std::vector<ModelSetup>> groups{{{8, 256, K::Standard, R::None},
                                                       {8, 256, K::Standard, R::FFN},
                                                       {8, 256, K::Standard, R::Layer}},
                                                      {{1, 2048, K::Standard, R::None},
                                                       {1, 2048, K::Standard, R::Layer},
                                                       {1, 2048, K::MemoryEfficient, R::None},
                                                       {1, 2048, K::MemoryEfficient, R::Layer}}};
    for (const auto& group : groups) {
      Model m(group[0].B, group[0].T);
      std::vector<double> best(group.size(), 1e30);
      for (const ModelSetup& s : group) m.step(s);  // warm-up
      for (int r = 0; r < rounds; ++r)
        for (size_t i = 0; i < group.size(); ++i) {
          const auto t0 = Clock::now();
          m.step(group[i]);
          best[i] = std::min(best[i], std::chrono::duration<double>(Clock::now() - t0).count());
        }
      for (size_t i = 0; i < group.size(); ++i)
        std::printf("| %lld x %lld | %s | %s | %.4f | %.1f |\n", static_cast<long long>(group[i].B),
                    static_cast<long long>(group[i].T), nn::to_string(group[i].kernel),
                    recompute_name(group[i].recompute), best[i],
                    peak_model_in_child(self, group[i], threads) / (1 << 20));
      std::fflush(stdout);
    }
  }
  return 0;
}
