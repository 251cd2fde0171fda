// bench_moe: the mixture of experts (nn/moe.h) grouped per expert, one sgemm
// per matrix per expert, against the two ways that do not group:
//
//   grouped     nn::MoE: each expert's tokens gathered into one (n_e, D)
//               buffer; forward and backward
//   every       every expert run densely on every token, the outputs masked
//               by the gates (E / k times the products); forward and backward
//   per token   forward only: a loop over the kept assignments, each expert
//               run on one row (a product per token); no graph
//   dense       one FFN of the same width on every token (the products of
//               k = 1 with no routing): the floor the grouped layer nears
//
//   build/rel-f32/bench_moe --tokens 1024 --d-model 512 --d-ff 2048 --experts 8 --k 1
//
// Rounds are interleaved (grouped, every, per token, grouped, ...) and each
// side is reported by its best round. Random weights and inputs; the routing
// of an untrained router is roughly uniform, so few assignments are dropped
// at capacity factor 1.25 (the count is printed).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "core/blas.h"
#include "core/parallel.h"
#include "nn/moe.h"

using namespace qkv;
using Clock = std::chrono::steady_clock;

namespace {
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  int threads = 1, rounds = 3;
  int64_t N = 1024, D = 512, F = 2048, E = 8, k = 1;
  double cf = 1.25;
  CLI::App app{"bench_moe: a mixture of experts grouped per expert vs ungrouped (qkv)"};
  app.add_option("--threads", threads, "threads for our kernels")->check(CLI::Range(1, 256));
  app.add_option("--rounds", rounds, "timed rounds (the fastest is reported)")
      ->check(CLI::Range(1, 100));
  app.add_option("--tokens", N, "tokens N (rows of x)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--d-model", D, "D")->check(CLI::Range(1, 1 << 14));
  app.add_option("--d-ff", F, "each expert's hidden width")->check(CLI::Range(1, 1 << 16));
  app.add_option("--experts", E, "E")->check(CLI::Range(2, 1024));
  app.add_option("--k", k, "experts per token")->check(CLI::Range(1, 1024));
  app.add_option("--capacity-factor", cf, "capacity factor");
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);
  blas_single_threaded();
  try {
    Generator g(1);
    nn::MoE moe(nn::Activation::GELU, D, F, {E, k, cf}, true, g);
    Var x(Tensor::normal({N, D}, 0, 1, g), true);
    const Tensor up = Tensor::normal({N, D}, 0, 1, g);
    std::vector<Var> params = moe.parameters();

    auto grouped = [&] {
      Var y = moe(x);
      (sum(y * Var(up)) + moe.aux_loss() * real(0.01)).backward();
    };
    // every expert on every token, weighted by (gate * kept) (N, E) column by column
    auto every = [&] {
      Var y0 = moe(x);  // the routing and P, as the grouped side makes them
      const nn::MoERouting& r = *moe.routing();
      Tensor W = Tensor::zeros({N, E});
      Tensor P = nn::moe_router(x, moe.router->weight).data();
      for (int64_t n = 0; n < N; ++n) {
        real s = 0;
        for (int64_t c = 0; c < k; ++c) s += P.data()[n * E + r.expert[n * k + c]];
        for (int64_t c = 0; c < k; ++c)
          if (r.kept[n * k + c])
            W.data()[n * E + r.expert[n * k + c]] =
                P.data()[n * E + r.expert[n * k + c]] / (k == 1 ? real(1) : s);
      }
      Var y;
      for (int64_t e = 0; e < E; ++e) {
        Tensor col = Tensor::empty({N, 1});
        for (int64_t n = 0; n < N; ++n) col.data()[n] = W.data()[n * E + e];
        Var term = moe.experts[e]->forward(x) * Var(col);  // (N, D) * (N, 1)
        y = y.defined() ? y + term : term;
      }
      sum(y * Var(up)).backward();
    };
    auto per_token = [&] {
      NoGradGuard no_grad;
      Var y0 = moe(x);
      const nn::MoERouting& r = *moe.routing();
      Tensor y = Tensor::zeros({N, D});
      for (int64_t e = 0; e < E; ++e)
        for (int64_t n : r.rows[e]) {
          Var row(x.data().reshape({N, D}).slice0(n, n + 1));
          Tensor out = moe.experts[e]->forward(row).data();  // (1, D): one product per token
          for (int64_t i = 0; i < D; ++i) y.data()[n * D + i] += out.data()[i];
        }
    };
    auto grouped_forward = [&] {
      NoGradGuard no_grad;
      moe(x);
    };
    // one dense FFN of the same width on every token: the products of k = 1
    auto dense_ffn = nn::make_ffn(nn::Activation::GELU, D, F, true, g);
    auto dense = [&] { sum(dense_ffn->forward(x) * Var(up)).backward(); };
    double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
    for (int round = 0; round < rounds; ++round) {
      auto t0 = Clock::now();
      grouped();
      best[0] = std::min(best[0], ms_since(t0));
      moe.zero_grad();
      x.clear_grad();
      t0 = Clock::now();
      every();
      best[1] = std::min(best[1], ms_since(t0));
      moe.zero_grad();
      x.clear_grad();
      t0 = Clock::now();
      grouped_forward();
      best[2] = std::min(best[2], ms_since(t0));
      t0 = Clock::now();
      per_token();
      best[3] = std::min(best[3], ms_since(t0));
      t0 = Clock::now();
      dense();
      best[4] = std::min(best[4], ms_since(t0));
      dense_ffn->zero_grad();
      x.clear_grad();
    }
    std::printf(
        "MoE: N %lld tokens, D %lld, d_ff %lld (gelu), E %lld, k %lld, capacity factor %.2f "
        "(capacity %lld, %lld of %lld assignments dropped), %d thread(s), best of %d round(s)\n\n",
        (long long)N, (long long)D, (long long)F, (long long)E, (long long)k, cf,
        (long long)moe.routing()->capacity, (long long)moe.routing()->dropped, (long long)(N * k),
        threads, rounds);
    std::printf("| layer | forward + backward ms | forward ms |\n|---|---:|---:|\n");
    std::printf("| grouped per expert | %.1f | %.1f |\n", best[0], best[2]);
    std::printf("| every expert on every token | %.1f | |\n", best[1]);
    std::printf("| per token (a product per row) | | %.1f |\n", best[3]);
    std::printf("| one dense FFN of width d_ff on every token | %.1f | |\n", best[4]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_moe: %s\n", e.what());
    return 1;
  }
  return 0;
}
