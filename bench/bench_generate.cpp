// bench_generate: a GPT generating text with the key/value cache and without
// it (the whole sequence through the model at every step), for each attention
// kernel the cache decodes.
//
//   build/rel-f32/bench_generate --threads 1 --new 512
//   build/rel-f32/bench_generate --attention sparse,linear --window 64 --global-every 32
//
// A GPT of GPTConfig's default sizes (vocab 512, d_model 128, 4 heads, 2
// layers, d_ff 512, Pre-LN) with seeded random weights and a position table
// of exactly --prompt + --new rows continues one prompt of --prompt random
// tokens by --new tokens, greedily (temperature 0: no draw to vary), with each
// kernel of --attention. Each kernel is timed cached and uncached, best of
// --rounds, the two interleaved; the two must give the same tokens (a
// difference at a near-tie of an untrained model's logits is reported, not
// hidden: "same tokens" then says where the outputs part).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "core/blas.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "generation/sampling.h"

using namespace qkv;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  int threads = 1, rounds = 1;
  int64_t prompt_len = 16, new_tokens = 512, window = 128, global_every = 64;
  std::string kernels = "standard,sparse,linear";
  CLI::App app{"bench_generate: GPT generation with and without the key/value cache (qkv)"};
  app.add_option("--threads", threads, "threads for our kernels")->check(CLI::Range(1, 256));
  app.add_option("--rounds", rounds, "timed rounds (the fastest is reported)")
      ->check(CLI::Range(1, 100));
  app.add_option("--prompt", prompt_len, "prompt tokens")->check(CLI::Range(1, 1 << 16));
  app.add_option("--new", new_tokens, "tokens generated")->check(CLI::Range(1, 1 << 16));
  app.add_option("--attention", kernels, "comma-separated kernels: standard, sparse, linear, ...");
  app.add_option("--window", window, "sparse window")->check(CLI::Range(1, 1 << 20));
  app.add_option("--global-every", global_every, "sparse global positions (0: none)")
      ->check(CLI::Range(0, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);
  blas_single_threaded();
  try {
    std::printf(
        "GPT (vocab 512, d_model 128, 4 heads, 2 layers, d_ff 512), one prompt of %lld tokens, "
        "%lld new tokens greedily, %d thread(s), best of %d round(s).\n\n",
        static_cast<long long>(prompt_len), static_cast<long long>(new_tokens), threads, rounds);
    std::printf(
        "| attention | cached s | uncached s | cached tok/s | uncached tok/s | cached vs "
        "uncached | same tokens |\n|---|---:|---:|---:|---:|---:|---|\n");
    std::stringstream list(kernels);
    for (std::string name; std::getline(list, name, ',');) {
      nn::GPTConfig c;
      c.attention = nn::attention_kernel_from_string(name);
      c.window = window;
      c.global_every = global_every;
      c.max_positions = prompt_len + new_tokens;
      c.seed = 1;
      nn::GPT gpt(c);
      gpt.eval();
      Generator g(2);
      nn::Tokens prompt{{}, 1, prompt_len, {}};
      for (int64_t i = 0; i < prompt_len; ++i) prompt.ids.push_back(g.randint(0, c.vocab));
      nn::SampleOptions o;
      o.max_new_tokens = new_tokens;
      o.temperature = 0;
      double best[2] = {1e30, 1e30};
      std::vector<int64_t> out[2];
      for (int r = 0; r < rounds; ++r)
        for (int cached = 1; cached >= 0; --cached) {
          o.use_cache = cached == 1;
          Generator unused(0);
          const auto t0 = Clock::now();
          out[cached] = nn::generate(gpt, prompt, o, unused)[0];
          best[cached] =
              std::min(best[cached], std::chrono::duration<double>(Clock::now() - t0).count());
        }
      std::string same = "yes";
      if (out[0] != out[1]) {
        size_t i = 0;
        while (i < out[0].size() && i < out[1].size() && out[0][i] == out[1][i]) ++i;
        same = "no: from token " + std::to_string(i);
      }
      std::string label = name;
      if (c.attention == nn::AttentionKernel::Sparse)
        label += " (window " + std::to_string(window) + ", global every " +
                 std::to_string(global_every) + ")";
      std::printf("| %s | %.3f | %.3f | %.0f | %.0f | %.1fx | %s |\n", label.c_str(), best[1],
                  best[0], double(new_tokens) / best[1], double(new_tokens) / best[0],
                  best[0] / best[1], same.c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
