// The memory a run will take, estimated before any work (trainer/trainer.h's
// detail): the data's bytes, the model's parameters and optimizer state, and
// the activations and attention maps of a step, each set against the
// machine's physical memory, so that a run too large for it is refused with
// the numbers rather than killed by the kernel mid-run.
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "trainer/trainer.h"

namespace qkv::train {

namespace detail {

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 8e9;
}
std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GiB", bytes / 1073741824.0);
  return b;
}
// Refuses data whose estimated `bytes` would take more than half the
// machine's memory, before any of it is allocated: "<what>: <detail> need
// about 12.3 GiB, more than half of this machine's 23.4 GiB".
void check_data_memory(double bytes, const std::string& what, const std::string& detail_text) {
  const double have = physical_memory_bytes();
  if (bytes > 0.5 * have)
    throw Error(what + ": " + detail_text + " need about " + gib(bytes) +
                ", more than half of this machine's " + gib(have));
}
// Numbers one attention layer keeps per query token from forward until its
// backward, and numbers it holds for one (b, h) at a time in backward (per
// thread), by kernel, for S keys: what nn/attention.cpp and the kernels'
// files allocate beyond Q, K, V and O (counted with the other activations).
//   standard          P (B,H,T,S) kept: H*S per query; backward one (T,S)
//                     block per thread for dP (nn/attention.cpp)
//   memory-efficient  one log-sum-exp per row (B,H,T): H per query; per-thread
//                     blocks of a few 64x64 tiles (nn/attention_blocks.cpp)
//   sparse            the same as memory-efficient (nn/attention_sparse.cpp)
//   linear            nothing kept; per thread (T+S)*d_k + T*d_v for one head
//                     (nn/attention_linear.cpp)
//   auto              standard while P fits --attention-budget (or there is
//                     no budget), else memory-efficient
AttentionNumbers attention_numbers(const TrainConfig& c, int64_t B, int64_t T, int64_t S) {
  const double H = double(c.heads), dk = double(c.d_k > 0 ? c.d_k : c.d_model / c.heads);
  const double dv = double(c.d_model / c.heads), tiles = 4 * 64.0 * 64.0;
  std::string k = c.attention;
  if (k == "auto")
    k = c.attention_budget > 0 &&
                4.0 * double(B) * H * double(T) * double(S) > double(c.attention_budget) * 1048576
            ? "memory-efficient"
            : "standard";
  if (k == "standard") return {H * double(S), double(T) * double(S)};
  if (k == "linear") return {0, double(T + S) * dk + double(T) * dv};
  return {H, tiles};  // memory-efficient, sparse
}

// Refuses a model or batch whose memory would clearly not fit, before it is
// built. An estimate: weights, gradients and Adam's two moments (16 bytes per
// parameter), the activations a step keeps (a generous 40 numbers of width
// max(D, F) per token per layer: values and the gradients of backward), the
// attention's own numbers by kernel (attention_numbers) and the logits.
// Against peak RSS (/usr/bin/time -v) of train --model gpt --format text
// --d-model 64 --heads 4 --layers 2 --d-ff 256 --batch 1 --steps 2
// --threads 1 with a --valid of one window, at --context T:
//   kernel            T       measured  estimated  (before: 4 H T per token)
//   standard          2,048     203 MB     340 MB     709 MB
//   standard          4,096     680 MB   1,014 MB   2,490 MB
//   memory-efficient  4,096      76 MB     343 MB   2,490 MB
//   memory-efficient 16,384     225 MB   1,366 MB      36 GB
//   memory-efficient 65,536  >= 764 MB   5,457 MB     555 GB  (peak after 23 min, unfinished)
//   sparse            4,096      80 MB     343 MB   2,490 MB
//   sparse           16,384     232 MB   1,366 MB      36 GB
//   linear            4,096      74 MB     344 MB   2,490 MB
//   linear           16,384     225 MB   1,371 MB      36 GB
//   linear           65,536     827 MB   5,480 MB     555 GB
// (2026-11-28, AVX2 EPYC, 2 cores, build/rel-f32). The attention term now
// follows each kernel; the rest stays 4-7x over at this width (40 numbers of
// max(D, F) per token per layer against ~1,450 measured), a bound kept
// generous for other shapes.
void check_memory(const TrainConfig& c, int64_t V, int64_t T) {
  const double D = double(c.d_model), F = double(c.d_ff), L = double(c.layers), H = double(c.heads);
  // seq2seq: an encoder and a decoder (with cross-attention); gpt, encoder: one stack.
  const double stacks = family(c.model, "--model").reports.stacks;
  const double E = c.d_k > 0 ? H * double(c.d_k) : D;  // W_Q, W_K (E, D); W_V, W_O (D, D)
  const double params =
      stacks * L * (2 * E * D + 2 * D * D + 2 * D * F) + 2 * double(V) * D + double(T) * D;
  const double tokens = double(c.batch) * double(T);
  // attention maps per layer at T = S (the encoder-decoder: self-, self- and cross-)
  const double attentions = attention_maps(family(c.model, "--model"), 1, 1);
  const AttentionNumbers a = attention_numbers(c, c.batch, T, T);
  const double threads = std::max(1u, std::thread::hardware_concurrency());
  const double acts = stacks * L * tokens * 40 * std::max(D, F) +
                      attentions * L * tokens * a.kept_per_query + threads * a.per_thread +
                      3 * tokens * double(V);
  const double bytes = 16 * params + double(sizeof(real)) * acts, have = physical_memory_bytes();
  if (bytes > 0.8 * have) {
    char m[300];
    std::snprintf(
        m, sizeof m,
        "this model and batch need about %.1f GiB (--d-model %lld, --d-ff %lld, --layers %lld, "
        "--batch %lld, %lld tokens per sequence), more than this machine's %.1f GiB",
        bytes / 1073741824.0, (long long)c.d_model, (long long)c.d_ff, (long long)c.layers,
        (long long)c.batch, (long long)T, have / 1073741824.0);
    throw Error(m);
  }
}

}  // namespace detail

}  // namespace qkv::train
