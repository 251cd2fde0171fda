// bench_train: times one full training step of a Transformer (zero grads,
// forward, loss, backward, Adam step) and a forward-only pass, and measures
// the sgemm ceiling on the step's own matrix shapes in the same process.
//
//   build/rel-f32/bench_train --config tiny --threads 1
//   build/rel-f32/bench_train --config gpt --threads 2 --steps 20 --warmup 3 --json
//   build/rel-f32/bench_train --config gpt --threads 2 --contend
//   build/rel-f32/bench_train --config small --recompute layer --no-ceiling --json
//
// --contend times the steps under a competing load: a child process spins on
// one core (the last one this process may use) from before the warm-up steps
// until the forward timing ends, as another program on the machine would.
// It is killed when the timing ends, and stops by itself if bench_train dies
// (it watches its parent) or after --contend-limit seconds.
//
// --instruments N records the training instruments (trainer/instruments.h)
// every N-th step, counting the warm-up steps, as train --instruments N does.
//
// --recompute none|ffn|layer sets what every layer recomputes in backward
// instead of keeping (models/encoder_decoder.h, Recompute); bench/run_recompute.sh
// runs each setting in a process of its own.
//
// One configuration and thread count per process, so the peak RSS (VmHWM)
// belongs to that configuration alone. bench/run.sh runs them all and writes
// BENCHMARKS.md; with --save-init/--save-batch it hands the initial weights and
// the token batch to bench/bench_torch.py, which times the same step in PyTorch.
//
// What is reported:
//   step ms      median over --steps timed steps, after --warmup untimed ones
//                (and their mean, step_ms_mean in --json)
//   forward ms   median of forward + loss under NoGradGuard (no graph)
//   tokens/s     B*T / step time: the target tokens (those that carry a loss)
//   GFLOP/s      matmul FLOPs of one step (gemm_flop_count() delta) / step time
//   ceiling      the same FLOPs / the time sgemm alone needs for the step's
//                products, each timed on its own (see derive_step_shapes)
//   allocs       tensor-allocator cache misses during the timed steps (0 when
//                steady-state training reuses every tensor buffer), and the
//                C++ heap allocations (operator new) per step and per forward:
//                0 once the pools that the graph's nodes and bookkeeping come
//                from (core/pool.h) are warm
//   peak RSS     VmHWM from /proc/self/status, read before the ceiling runs
//   tensor MiB   of one more training step after the timed ones, from qkv's
//                allocator counters (core/allocator.h), above what was held
//                before it (weights, gradients, Adam's moments): "saved" is
//                what the graph holds at the end of forward + loss (the saved
//                activations), "step peak" the most held at once during the
//                whole step (reset_peak_stats before it)
//   threads      parallel regions per step run on a team, and run in turn on
//                the calling thread while the team was benched (a competing
//                load, core/parallel.h), and how often it was benched
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <sched.h>
#include <signal.h>
#include <string>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <tuple>
#include <vector>

#include "autograd/var.h"
#include "autograd/ops.h"
#include "nn/moe.h"
#include "core/allocator.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "checkpoint/checkpoint.h"
#include "nn/cross_entropy.h"
#include "io/safetensors.h"
#include "nn/attention.h"
#include "nn/attention_internal.h"
#include "models/transformer.h"
#include "optim/adam.h"
#include "trainer/instruments.h"

// Every plain operator new of the process is counted (libstdc++'s array and
// nothrow forms call this one; the over-aligned forms are not counted), so
// the report can say how many heap blocks a step takes besides tensor memory.
namespace {
std::atomic<int64_t> g_heap_allocs{0};
}
// GCC cannot see that these replace the global pair, and warns about free()
// on memory from operator new.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  g_heap_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

using namespace qkv;
using Clock = std::chrono::steady_clock;

namespace {

// ---- the four configurations of the issue ----------------------------------------
struct BenchCase {
  std::string name;
  bool gpt = false;      // decoder-only GPT-2 shape, else encoder-decoder
  int64_t B = 0, T = 0;  // batch, sequence length (source length S = T)
  int64_t D = 0, H = 0, F = 0, enc = 0, dec = 0, V = 0;  // dec = layers for gpt
};

BenchCase make_case(const std::string& name) {
  // Encoder-decoder: post-LN, ReLU, sinusoidal positions, dropout 0, vocab 16.
  // GPT: pre-LN, GELU, learned positions, tied embedding/output, biases.
  if (name == "tiny") return {name, false, 64, 12, 64, 4, 256, 2, 2, 16};
  if (name == "small") return {name, false, 64, 32, 128, 4, 512, 2, 2, 16};
  if (name == "base") return {name, false, 32, 32, 512, 8, 2048, 6, 6, 16};
  if (name == "gpt") return {name, true, 8, 64, 128, 4, 512, 0, 2, 512};
  // The character-level GPT people train first (bench/run_chargpt.py trains it
  // on a text): 4 layers, context 64, batch 12, ~90 characters.
  if (name == "chargpt") return {name, true, 12, 64, 128, 4, 512, 0, 4, 87};
  throw Error("bench_train: unknown config '" + name + "' (tiny, small, base, gpt, chargpt)");
}

// ---- the matrix products of one training step ----------------------------------------
// Each distinct sgemm shape (transA, transB, M, N, K, batch) with how many times
// the forward and the backward pass run it. batch > 1 stands for the per-head
// attention products: B*H independent (T,S)-sized products.
// The seed of the random matrices a gemm is timed on: any value (only the
// shapes matter to the time), fixed so runs are alike.
constexpr uint64_t kGemmInputSeed = 7;

struct GemmShape {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0, batch = 1;
  int64_t fwd = 0, bwd = 0;  // uses per forward pass / per backward pass
  double flops() const { return 2.0 * M * N * K * batch; }
};

class ShapeList {
 public:
  void add(bool backward, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t batch = 1,
           int64_t times = 1) {
    auto key = std::make_tuple(ta, tb, M, N, K, batch);
    auto it = index_.find(key);
    if (it == index_.end()) {
      it = index_.emplace(key, shapes_.size()).first;
      shapes_.push_back({ta, tb, M, N, K, batch, 0, 0});
    }
    (backward ? shapes_[it->second].bwd : shapes_[it->second].fwd) += times;
  }
  std::vector<GemmShape>& shapes() { return shapes_; }
  const std::vector<GemmShape>& shapes() const { return shapes_; }
  double flops(bool with_backward) const {
    double f = 0;
    for (const auto& s : shapes_) f += s.flops() * (s.fwd + (with_backward ? s.bwd : 0));
    return f;
  }

 private:
  std::vector<GemmShape> shapes_;
  std::map<std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t>, size_t> index_;
};

constexpr bool kFwd = false, kBwd = true;

// Linear y = x W^T (+ b), x (N,in), W (out,in); nn/linear.cpp.
//   forward  Y  = X W^T    (N,in)x(in,out):   gemm(F,T, N,out,in)
//   backward dX = dY W     (N,out)x(out,in):  gemm(F,F, N,in,out)
//            dW = dY^T X   (out,N)x(N,in):    gemm(T,F, out,in,N)
void linear_shapes(ShapeList& s, int64_t N, int64_t in, int64_t out, int64_t times) {
  s.add(kFwd, false, true, N, out, in, 1, times);
  s.add(kBwd, false, false, N, in, out, 1, times);
  s.add(kBwd, true, false, out, in, N, 1, times);
}

// Fused multi-head attention, nn/attention.cpp: query rows Nq = B*T, key/value
// rows Nkv = B*S, per head (B*H of them) scores (T,S) over d_k = D/H. The
// projections that read the same input are one stacked sgemm: Q, K, V
// together (3D outputs) for self-attention; Q alone and K, V together (2D)
// for cross-attention.
//   forward   stacked input projections; output projection (D -> D)
//             scores = Q_h K_h^T  (T,d_k)x(d_k,S): gemm(F,T, T,S,d_k)   x B*H
//             O_h    = P V_h      (T,S)x(S,d_k):   gemm(F,F, T,d_k,S)   x B*H
//   backward  every projection's dX and dW
//             O_h = P V_h again, unless attention_keeps_head_outputs
//                                                     gemm(F,F, T,d_k,S)
//             dP = dO V^T  gemm(F,T, T,S,d_k);  dV = P^T dO   gemm(T,F, S,d_k,T)
//             dQ = dS K    gemm(F,F, T,d_k,S);  dK = dS^T Q   gemm(T,F, S,d_k,T)
void attention_shapes(ShapeList& s, int64_t B, int64_t T, int64_t S, int64_t D, int64_t H,
                      bool self, int64_t times) {
  const int64_t dk = D / H, BH = B * H;
  if (self) {
    linear_shapes(s, B * T, D, 3 * D, times);  // [w_q; w_k; w_v]
  } else {
    linear_shapes(s, B * T, D, D, times);      // w_q
    linear_shapes(s, B * S, D, 2 * D, times);  // [w_k; w_v]
  }
  linear_shapes(s, B * T, D, D, times);  // w_o
  s.add(kFwd, false, true, T, S, dk, BH, times);
  s.add(kFwd, false, false, T, dk, S, BH, times);
  s.add(kBwd, false, true, T, S, dk, BH, times);
  s.add(kBwd, true, false, S, dk, T, BH, 2 * times);
  const int64_t pv_bwd =
      nn::detail::attention_keeps_head_outputs(B, T, S, D, H) ? 1 : 2;  // dQ [+ O again]
  s.add(kBwd, false, false, T, dk, S, BH, pv_bwd * times);
}

// Feed-forward net, nn/feedforward.cpp: two linears D -> F -> D on N rows.
void ffn_shapes(ShapeList& s, int64_t N, int64_t D, int64_t F, int64_t times) {
  linear_shapes(s, N, D, F, times);
  linear_shapes(s, N, F, D, times);
}

// Recompute runs a part's forward again inside backward: its forward
// products, `layers` times, counted as backward uses.
void add_forward_again(ShapeList& s, const ShapeList& part, int64_t layers) {
  for (const GemmShape& g : part.shapes())
    s.add(kBwd, g.ta, g.tb, g.M, g.N, g.K, g.batch, g.fwd * layers);
}

// Every product of one step of the configuration. Embeddings, positions,
// LayerNorm, softmax and the loss use no matrix product. The output
// projection (generator, or the GPT's tied lm head) is a linear D -> V whose
// weight gradient is taken even when tied (it adds onto the embedding's).
// With recompute, each layer's feed-forward net (ffn) or whole layer (layer)
// runs its forward once more in backward.
ShapeList derive_step_shapes(const BenchCase& c, nn::Recompute rc) {
  ShapeList s;
  const int64_t N = c.B * c.T, S = c.T;
  // one layer of each kind, and its feed-forward net alone
  ShapeList enc, dec, enc_ffn, dec_ffn;
  if (c.gpt) {
    attention_shapes(dec, c.B, c.T, c.T, c.D, c.H, true, 1);  // causal self-attention
  } else {
    attention_shapes(enc, c.B, S, S, c.D, c.H, true, 1);  // encoder self-attention
    ffn_shapes(enc, c.B * S, c.D, c.F, 1);
    ffn_shapes(enc_ffn, c.B * S, c.D, c.F, 1);
    attention_shapes(dec, c.B, c.T, c.T, c.D, c.H, true, 1);  // decoder self-attention
    attention_shapes(dec, c.B, c.T, S, c.D, c.H, false, 1);   // cross-attention over memory
  }
  ffn_shapes(dec, N, c.D, c.F, 1);
  ffn_shapes(dec_ffn, N, c.D, c.F, 1);
  // `layers` layers like `part`, each running `ffn` (or all of `part`) again when recomputed
  auto add_layers = [&](const ShapeList& part, const ShapeList& ffn, int64_t layers) {
    for (const GemmShape& g : part.shapes()) {
      s.add(kFwd, g.ta, g.tb, g.M, g.N, g.K, g.batch, g.fwd * layers);
      s.add(kBwd, g.ta, g.tb, g.M, g.N, g.K, g.batch, g.bwd * layers);
    }
    if (rc == nn::Recompute::Layer) add_forward_again(s, part, layers);
    if (rc == nn::Recompute::FFN) add_forward_again(s, ffn, layers);
  };
  if (!c.gpt) add_layers(enc, enc_ffn, c.enc);
  add_layers(dec, dec_ffn, c.dec);
  linear_shapes(s, N, c.D, c.V, 1);
  return s;
}

// Times one shape alone on contiguous operands (leading dimension = row
// length) that stay in cache between calls: an upper bound on what sgemm can
// do for that shape. best() is seconds per call, the best of all rounds.
class GemmTimer {
 public:
  explicit GemmTimer(const GemmShape& g) : g_(g) {
    a_cols_ = g.ta ? g.M : g.K;
    b_cols_ = g.tb ? g.K : g.N;
    sa_ = g.M * g.K;
    sb_ = g.K * g.N;
    sc_ = g.M * g.N;
    Generator gen(kGemmInputSeed);
    A_ = Tensor::uniform({g.batch * sa_}, -1, 1, gen);
    B_ = Tensor::uniform({g.batch * sb_}, -1, 1, gen);
    C_ = Tensor::zeros({g.batch * sc_});
    call();  // warm caches and threads
    best_ = per_call(1);
    // Enough calls per round to last ~2 ms (timer and thread wake-up noise).
    reps_ = std::clamp<int64_t>(static_cast<int64_t>(2e-3 / std::max(best_, 1e-7)), 1, 20000);
  }
  void round() { best_ = std::min(best_, per_call(reps_)); }
  double best() const { return best_; }

 private:
  void call() {
    if (g_.batch == 1)
      gemm(g_.ta, g_.tb, g_.M, g_.N, g_.K, 1, A_.data(), a_cols_, B_.data(), b_cols_, 0, C_.data(),
           g_.N);
    else  // B*H products, as the attention's per-head loop (one whole gemm per thread)
      gemm_batched(g_.ta, g_.tb, g_.batch, g_.M, g_.N, g_.K, 1, A_.data(), sa_, a_cols_, B_.data(),
                   sb_, b_cols_, 0, C_.data(), sc_, g_.N);
  }
  double per_call(int64_t reps) {
    const auto t0 = Clock::now();
    for (int64_t r = 0; r < reps; ++r) call();
    return std::chrono::duration<double>(Clock::now() - t0).count() / reps;
  }
  GemmShape g_;
  Tensor A_, B_, C_;
  int64_t a_cols_, b_cols_, sa_, sb_, sc_, reps_ = 1;
  double best_ = 0;
};

// ---- a competing load ---------------------------------------------------------------
// A child process that keeps one core busy until it is destroyed. Forked from
// a process that may already run OpenMP threads, the child only makes system
// calls and spins (what is safe after fork in a threaded process).
class Contender {
 public:
  Contender(int cpu, int limit_s) : cpu_(cpu) {
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) throw Error("bench_train: --contend: fork failed");
    if (pid_ == 0) spin(parent, cpu, limit_s);
  }
  ~Contender() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  Contender(const Contender&) = delete;
  Contender& operator=(const Contender&) = delete;
  int cpu() const { return cpu_; }

  // The last CPU this process may run on: the core the spinner takes.
  static int last_cpu() {
    cpu_set_t set;
    CPU_ZERO(&set);
    int last = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) last = c;
    return last;
  }

 private:
  [[noreturn]] static void spin(pid_t parent, int cpu, int limit_s) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);       // killed with the parent's thread...
    if (getppid() != parent) _exit(0);      // ...unless the parent is already gone
    alarm(static_cast<unsigned>(limit_s));  // SIGALRM ends it at the limit
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
    volatile uint64_t x = 0;
    for (;;) {
      for (int i = 0; i < (1 << 24); ++i) x = x + 1;
      if (getppid() != parent) _exit(0);
    }
  }
  pid_t pid_ = -1;
  int cpu_ = 0;
};

// ---- measurement helpers ---------------------------------------------------------------
double median(std::vector<double> v) {
  if (v.empty()) return 0;  // --no-forward: nothing timed
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB -> MB
  return -1;
}

std::vector<int64_t> random_ids(Generator& g, int64_t n, int64_t vocab) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = g.randint(0, vocab);
  return v;
}

Tensor ids_tensor(const std::vector<int64_t>& ids, int64_t B, int64_t T) {
  std::vector<real> v(ids.begin(), ids.end());  // small integers: exact in F32
  return Tensor::from_vector(v, {B, T});
}

}  // namespace

// --seed's default, the model's initialisation and the batch's: any fixed
// value, so that runs time the same work.
constexpr uint64_t kBenchSeed = 1;

int main(int argc, char** argv) {
  std::string config = "tiny", save_init, save_batch;
  int threads = 1, steps = 20, warmup = 3;
  uint64_t seed = kBenchSeed;
  bool json = false, no_ceiling = false, show_shapes = false, contend = false, fixed = false;
  bool no_forward = false;
  int contend_limit = 3600;
  int64_t instruments = 0;
  std::string recompute = "none", precision = "fp32";
  CLI::App app{"bench_train: time a Transformer training step and its sgemm ceiling (qkv)"};
  app.add_option("--config", config, "tiny, small, base, gpt or chargpt")
      ->check(CLI::IsMember({"tiny", "small", "base", "gpt", "chargpt"}));
  app.add_option("--threads", threads, "threads for our kernels and OpenBLAS")
      ->check(CLI::Range(1, 256));
  app.add_option("--steps", steps, "timed steps (the median is reported)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::Range(0, 100000));
  app.add_option("--seed", seed, "seed of the weights and the token batch");
  app.add_option("--save-init", save_init,
                 "write the initial weights here (safetensors, qkv names)");
  app.add_option("--save-batch", save_batch,
                 "write the token batch here (src, tgt, targets as F32)");
  app.add_flag("--no-ceiling", no_ceiling, "skip the sgemm ceiling measurement");
  app.add_flag("--no-forward", no_forward,
               "skip the forward-only timing (its figures print as 0), so that a profile of "
               "the process holds training steps only (bench/profile_share.py)");
  app.add_flag("--shapes", show_shapes, "also print each sgemm shape's ideal time and GFLOP/s");
  app.add_flag("--contend", contend, "time the steps while a spinning process keeps one core busy");
  app.add_option("--contend-limit", contend_limit,
                 "seconds after which the spinning process stops by itself")
      ->check(CLI::Range(1, 86400));
  app.add_flag("--fixed-threads", fixed,
               "always use --threads threads: no backing off to one under load "
               "(set_adaptive_threads(false), for comparison)");
  app.add_option("--recompute", recompute,
                 "none, ffn or layer: what each layer recomputes in backward instead of keeping");
  app.add_option("--precision", precision,
                 "matrix products: fp32, or bf16 (bfloat16 operands, float32 sums; the "
                 "ceiling too)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_flag("--json", json, "print one JSON line instead of the readable report");
  app.add_option("--instruments", instruments,
                 "record the training instruments every N steps (0: off), as train does")
      ->check(CLI::Range(0, 1000000));
  nn::MoESettings moe;  // --experts: a mixture of experts in every FFN (nn/moe.h)
  app.add_option("--experts", moe.experts, "a mixture of E experts in every FFN (0: dense)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--experts-per-token", moe.experts_per_token, "experts: k a token")
      ->check(CLI::Range(1, 1024));
  app.add_option("--capacity-factor", moe.capacity_factor, "experts: capacity factor");
  app.add_option("--aux-loss", moe.aux_loss, "experts: load-balancing loss coefficient");
  int64_t d_ff = 0;
  app.add_option("--d-ff", d_ff,
                 "the config's FFN width (each expert's with --experts); 0: its own")
      ->check(CLI::Range(0, 1 << 20));
  CLI11_PARSE(app, argc, argv);

  try {
    BenchCase c = make_case(config);
    if (d_ff > 0) c.F = d_ff;
    if (moe.experts > 0 && !nn::moe_settings_problem(moe).empty())
      throw Error("--experts: " + nn::moe_settings_problem(moe));
    if (recompute != "none" && recompute != "ffn" && recompute != "layer")
      throw Error("--recompute '" + recompute + "': expected none, ffn or layer");
    const nn::Recompute rc = recompute == "ffn"     ? nn::Recompute::FFN
                             : recompute == "layer" ? nn::Recompute::Layer
                                                    : nn::Recompute::None;
    set_num_threads(threads);
    if (fixed) set_adaptive_threads(false);
    set_matmul_precision(precision == "bf16" ? MatmulPrecision::bf16 : MatmulPrecision::fp32);

    // ---- model, optimizer, batch -------------------------------------------------
    std::shared_ptr<nn::Module> model;
    std::function<Var()> forward_loss;  // logits -> cross-entropy, (B,T,V) vs (B*T)
    Generator data_gen(seed * 7919 + 17);
    nn::Tokens src{random_ids(data_gen, c.B * c.T, c.V), c.B, c.T, {}};
    nn::Tokens tgt{random_ids(data_gen, c.B * c.T, c.V), c.B, c.T, {}};
    const std::vector<int64_t> targets = random_ids(data_gen, c.B * c.T, c.V);
    Metadata meta{{"config", c.name},
                  {"batch", std::to_string(c.B)},
                  {"seq_len", std::to_string(c.T)},
                  {"d_model", std::to_string(c.D)},
                  {"heads", std::to_string(c.H)},
                  {"d_ff", std::to_string(c.F)},
                  {"vocab", std::to_string(c.V)},
                  {"seed", std::to_string(seed)}};
    if (c.gpt) {
      nn::GPTConfig g;
      g.vocab = c.V;
      g.d_model = c.D;
      g.heads = c.H;
      g.layers = c.dec;
      g.d_ff = c.F;
      g.max_positions = c.T;
      g.dropout = 0;
      g.activation = nn::Activation::GELU;
      g.pre_norm = true;
      g.tie_weights = true;
      g.recompute = rc;
      g.seed = seed;
      g.moe = moe;
      auto m = std::make_shared<nn::GPT>(g);
      forward_loss = [m, &tgt, &targets, moe] {
        Var loss = nn::cross_entropy(m->forward(tgt), targets);
        Var aux = m->aux_loss();  // --experts: the training loss the trainer makes
        return aux.defined() ? loss + aux * real(moe.aux_loss) : loss;
      };
      model = m;
      meta.insert({{"model", "gpt"},
                   {"layers", std::to_string(c.dec)},
                   {"norm_first", "true"},
                   {"activation", "gelu"},
                   {"positions", "learned"},
                   {"tied", "true"}});
    } else {
      nn::TransformerConfig t;
      t.src_vocab = t.tgt_vocab = c.V;
      t.d_model = c.D;
      t.heads = c.H;
      t.encoder_layers = c.enc;
      t.decoder_layers = c.dec;
      t.d_ff = c.F;
      t.dropout = 0;
      t.activation = nn::Activation::ReLU;
      t.pre_norm = false;
      t.tie_weights = false;
      t.learned_positions = false;
      t.recompute = rc;
      t.seed = seed;
      t.moe = moe;
      auto m = std::make_shared<nn::Seq2SeqTransformer>(t);
      forward_loss = [m, &src, &tgt, &targets, moe] {
        Var loss = nn::cross_entropy(m->forward(src, tgt), targets);
        Var aux = m->aux_loss();
        return aux.defined() ? loss + aux * real(moe.aux_loss) : loss;
      };
      model = m;
      meta.insert({{"model", "seq2seq"},
                   {"encoder_layers", std::to_string(c.enc)},
                   {"decoder_layers", std::to_string(c.dec)},
                   {"norm_first", "false"},
                   {"activation", "relu"},
                   {"positions", "sinusoidal"},
                   {"tied", "false"}});
    }
    if (moe.experts > 0)
      meta.insert({{"experts", std::to_string(moe.experts)},
                   {"experts_per_token", std::to_string(moe.experts_per_token)},
                   {"capacity_factor", std::to_string(moe.capacity_factor)}});
    if (!save_init.empty()) nn::save(*model, save_init, meta);
    if (!save_batch.empty())
      write_safetensors(save_batch,
                        {{"src", ids_tensor(src.ids, c.B, c.T)},
                         {"tgt", ids_tensor(tgt.ids, c.B, c.T)},
                         {"targets", ids_tensor(targets, c.B, c.T)}},
                        meta);
    optim::Adam opt(model->parameters(), optim::AdamOptions{});  // lr 1e-3, PyTorch defaults

    // --instruments N: the training instruments (trainer/instruments.h) on
    // every N-th step, as train --instruments N records them (kept in memory).
    std::unique_ptr<train::Instruments> ins;
    if (instruments > 0) ins = std::make_unique<train::Instruments>(*model, instruments, "");
    int64_t step_number = 0;
    auto train_step = [&]() -> real {
      opt.zero_grad();
      train::Instruments* watching = ins && ins->due(++step_number) ? ins.get() : nullptr;
      if (watching) watching->watch(step_number);
      Var loss = forward_loss();
      if (watching) watching->unwatch();
      loss.backward();
      if (watching) watching->gradients();
      opt.step();
      if (watching) watching->updated(loss.item(), double(opt.lr), 0);
      return loss.item();
    };

    // ---- training steps --------------------------------------------------------------
    // Under --contend, the spinning process runs from here to the end of the
    // forward timing.
    std::unique_ptr<Contender> contender;
    if (contend) contender = std::make_unique<Contender>(Contender::last_cpu(), contend_limit);
    real loss_first = 0, loss_last = 0;
    for (int i = 0; i < warmup; ++i) {
      const real l = train_step();
      if (i == 0) loss_first = l;
    }
    const AllocatorStats a0 = allocator_stats();
    const int64_t flops0 = gemm_flop_count();
    std::vector<double> step_s;
    step_s.reserve(static_cast<size_t>(steps));  // no growth inside the count
    const int64_t heap0 = g_heap_allocs.load();
    const TeamStats team0 = team_stats();
    for (int i = 0; i < steps; ++i) {
      const auto t0 = Clock::now();
      const real l = train_step();
      step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      if (warmup == 0 && i == 0) loss_first = l;
      loss_last = l;
    }
    const int64_t step_flops = (gemm_flop_count() - flops0) / steps;
    const int64_t train_allocs = allocator_stats().system_allocs - a0.system_allocs;
    const double heap_per_step = double(g_heap_allocs.load() - heap0) / steps;
    const TeamStats team1 = team_stats();
    const int64_t team_regions = team1.team_regions - team0.team_regions;
    const int64_t benched_regions = team1.benched_regions - team0.benched_regions;
    const int64_t benches = team1.benches - team0.benches;

    // ---- forward only (forward + loss, no graph) ---------------------------------------
    std::vector<double> fwd_s;
    fwd_s.reserve(static_cast<size_t>(steps));  // no growth inside the count
    int64_t fwd_flops = 0, fwd_allocs = 0;
    double fwd_heap_per_step = 0;
    if (!no_forward) {
      NoGradGuard no_grad;
      for (int i = 0; i < std::max(1, warmup); ++i) forward_loss();
      const int64_t f0 = gemm_flop_count();
      const int64_t s0 = allocator_stats().system_allocs;
      const int64_t h0 = g_heap_allocs.load();
      for (int i = 0; i < steps; ++i) {
        const auto t0 = Clock::now();
        forward_loss();
        fwd_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      fwd_heap_per_step = double(g_heap_allocs.load() - h0) / steps;
      fwd_flops = (gemm_flop_count() - f0) / steps;
      fwd_allocs = allocator_stats().system_allocs - s0;
    }
    const int contend_cpu = contender ? contender->cpu() : -1;
    contender.reset();                    // the ceiling is measured on a quiet machine
    const double rss_mb = peak_rss_mb();  // before the ceiling's own buffers
    const AllocatorStats alloc_peak = allocator_stats();

    // ---- tensor memory of one more step (after the lifetime peaks above are read) -----
    // Above what is held before it (weights, gradients, Adam's moments): saved =
    // held at the end of forward + loss (the graph's saved tensors), step peak =
    // the most held at once during the step.
    int64_t saved_bytes = 0, step_peak_bytes = 0;
    {
      opt.zero_grad();
      reset_peak_stats();
      const int64_t held = allocator_stats().bytes_in_use;
      Var loss = forward_loss();
      saved_bytes = allocator_stats().bytes_in_use - held;
      loss.backward();
      opt.step();
      step_peak_bytes = allocator_stats().peak_in_use - held;
    }

    // ---- sgemm ceiling on the step's shapes ---------------------------------------------
    ShapeList shapes = derive_step_shapes(c, rc);
    const double derived_step = shapes.flops(true), derived_fwd = shapes.flops(false);
    double ideal_step_s = 0, ideal_fwd_s = 0;
    std::vector<std::unique_ptr<GemmTimer>> timers;
    if (!no_ceiling) {
      // Rounds over all shapes, best per shape: a burst of load from elsewhere
      // spoils one round of many shapes rather than every round of one.
      for (const GemmShape& g : shapes.shapes()) timers.push_back(std::make_unique<GemmTimer>(g));
      for (int round = 0; round < 7; ++round)
        for (auto& t : timers) t->round();
      for (size_t i = 0; i < timers.size(); ++i) {
        const GemmShape& g = shapes.shapes()[i];
        ideal_step_s += timers[i]->best() * (g.fwd + g.bwd);
        ideal_fwd_s += timers[i]->best() * g.fwd;
      }
    }
    const double mismatch = std::fabs(derived_step - step_flops) / std::max<double>(step_flops, 1);
    const double mismatch_fwd =
        no_forward ? 0 : std::fabs(derived_fwd - fwd_flops) / std::max<double>(fwd_flops, 1);

    const double step_ms = median(step_s) * 1e3, fwd_ms = median(fwd_s) * 1e3;
    // The mean counts the watched steps of --instruments, which the median skips.
    double step_mean_ms = 0;
    for (double v : step_s) step_mean_ms += v * 1e3 / double(step_s.size());
    const double tokens = static_cast<double>(c.B * c.T);
    const double gflops = step_flops / (step_ms * 1e-3) / 1e9;
    const double fwd_gflops = fwd_ms > 0 ? fwd_flops / (fwd_ms * 1e-3) / 1e9 : 0;
    const double ceiling = ideal_step_s > 0 ? derived_step / ideal_step_s / 1e9 : 0;
    const double ceiling_fwd = ideal_fwd_s > 0 ? derived_fwd / ideal_fwd_s / 1e9 : 0;

    if (mismatch > 0.03 || mismatch_fwd > 0.03)
      std::fprintf(stderr,
                   "bench_train: warning: %s: derived matmul FLOPs per step %.4g (forward %.4g) "
                   "but gemm_flop_count() counted %.4g (forward %.4g): the shape list in "
                   "derive_step_shapes is out of date, the ceiling is not the step's\n",
                   c.name.c_str(), derived_step, derived_fwd, static_cast<double>(step_flops),
                   static_cast<double>(fwd_flops));

    if (json) {
      nlohmann::json j = {{"impl", "qkv"},
                          {"config", c.name},
                          {"threads", threads},
                          {"steps", steps},
                          {"recompute", recompute},
                          {"precision", precision},
                          {"bf16_native", precision == "bf16" && bf16_products_native()},
                          {"contend", contend},
                          {"contend_cpu", contend_cpu},
                          {"adaptive", !fixed},
                          {"team_regions_per_step", double(team_regions) / steps},
                          {"benched_regions_per_step", double(benched_regions) / steps},
                          {"benches", benches},
                          {"warmup", warmup},
                          {"batch", c.B},
                          {"seq_len", c.T},
                          {"params", model->num_parameters()},
                          {"step_ms", step_ms},
                          {"step_ms_min", *std::min_element(step_s.begin(), step_s.end()) * 1e3},
                          {"step_ms_mean", step_mean_ms},
                          {"instruments", instruments},
                          {"fwd_ms", fwd_ms},
                          {"tokens_per_s", tokens / (step_ms * 1e-3)},
                          {"step_gflop", step_flops / 1e9},
                          {"fwd_gflop", fwd_flops / 1e9},
                          {"gflops", gflops},
                          {"fwd_gflops", fwd_gflops},
                          {"ceiling_gflops", ceiling},
                          {"ceiling_frac", ceiling > 0 ? gflops / ceiling : 0.0},
                          {"ceiling_fwd_gflops", ceiling_fwd},
                          {"gemm_shapes", static_cast<int64_t>(shapes.shapes().size())},
                          {"flop_mismatch", mismatch},
                          {"peak_rss_mb", rss_mb},
                          {"saved_mib", saved_bytes / 1048576.0},
                          {"step_peak_mib", step_peak_bytes / 1048576.0},
                          {"allocs_timed", train_allocs},
                          {"allocs_per_step", static_cast<double>(train_allocs) / steps},
                          {"fwd_allocs_timed", fwd_allocs},
                          {"heap_allocs_per_step", heap_per_step},
                          {"fwd_heap_allocs_per_step", fwd_heap_per_step},
                          {"loss_first", loss_first},
                          {"loss_last", loss_last}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      const std::string layers =
          c.gpt ? std::to_string(c.dec) : std::to_string(c.enc) + "+" + std::to_string(c.dec);
      std::printf(
          "qkv %s (B %lld, T %lld, D %lld, H %lld, F %lld, layers %s, V %lld), "
          "%d thread(s)%s, recompute %s, %s products%s, %lld parameters\n",
          c.name.c_str(), (long long)c.B, (long long)c.T, (long long)c.D, (long long)c.H,
          (long long)c.F, layers.c_str(), (long long)c.V, threads,
          contend ? (", one core (CPU " + std::to_string(contend_cpu) + ") kept busy").c_str() : "",
          recompute.c_str(), precision.c_str(),
          precision == "bf16" ? (bf16_products_native() ? " (vdpbf16ps)" : " (emulated)") : "",
          (long long)model->num_parameters());
      std::printf("  train step   %9.3f ms median of %d (min %.3f), %.0f tokens/s\n", step_ms,
                  steps, *std::min_element(step_s.begin(), step_s.end()) * 1e3,
                  tokens / (step_ms * 1e-3));
      std::printf("  forward      %9.3f ms median (forward + loss, no graph)\n", fwd_ms);
      std::printf("  matmul       %.4f GFLOP/step -> %.2f GFLOP/s; forward %.2f GFLOP/s\n",
                  step_flops / 1e9, gflops, fwd_gflops);
      if (ceiling > 0 && show_shapes) {
        std::printf("  %-3s %6s %6s %6s %6s %5s %5s %10s %9s %7s\n", "op", "M", "N", "K", "batch",
                    "fwd", "bwd", "us/call", "GFLOP/s", "share");
        for (size_t i = 0; i < timers.size(); ++i) {
          const GemmShape& g = shapes.shapes()[i];
          const double t = timers[i]->best();
          std::printf("  %c%c  %6lld %6lld %6lld %6lld %5lld %5lld %10.1f %9.1f %6.1f%%\n",
                      g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', (long long)g.M, (long long)g.N,
                      (long long)g.K, (long long)g.batch, (long long)g.fwd, (long long)g.bwd,
                      t * 1e6, g.flops() / t / 1e9, 100 * t * (g.fwd + g.bwd) / ideal_step_s);
        }
      }
      if (ceiling > 0)
        std::printf(
            "  sgemm ceiling %.2f GFLOP/s on the step's %zu shapes -> %.1f%% of it "
            "(forward ceiling %.2f)\n",
            ceiling, shapes.shapes().size(), 100 * gflops / ceiling, ceiling_fwd);
      std::printf(
          "  peak RSS     %.1f MB; tensor allocator peak %.1f MB (in use at once %.1f MB)\n",
          rss_mb, alloc_peak.peak_bytes / 1048576.0, alloc_peak.peak_in_use / 1048576.0);
      std::printf(
          "  step tensors %.1f MiB saved by forward + loss, %.1f MiB peak during the step "
          "(above weights, gradients and Adam's moments)\n",
          saved_bytes / 1048576.0, step_peak_bytes / 1048576.0);
      std::printf(
          "  allocations  %lld system allocs in %d timed steps (%.2f per step); "
          "forward-only %lld\n",
          (long long)train_allocs, steps, static_cast<double>(train_allocs) / steps,
          (long long)fwd_allocs);
      std::printf(
          "  threads      %.0f parallel regions per step on a team, %.0f with the team "
          "benched (run in turn); benched %lld time(s) in the timed steps\n",
          double(team_regions) / steps, double(benched_regions) / steps, (long long)benches);
      std::printf(
          "  heap         %.0f operator new calls per step (graph nodes and bookkeeping); "
          "forward-only %.0f\n",
          heap_per_step, fwd_heap_per_step);
      std::printf("  loss         %.5f at the first step, %.5f at the last\n",
                  static_cast<double>(loss_first), static_cast<double>(loss_last));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
